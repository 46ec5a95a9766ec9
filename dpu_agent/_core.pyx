# cython: boundscheck=False, wraparound=False, cdivision=True
"""Compiled predictor core of the agent (see csrc/predictor.hpp).

Three per-node predictors over slot ids ``0 .. num_nodes-1``, float32 state:

* :class:`TrendPredictor` -- the paper's self-feeding trend update (``step``) and the
  windowed linear-trend predictor over a ring of the last ``window`` values
  (``predict_window``);
* :class:`HoltPredictor` -- Holt's double exponential smoothing (``observe``/``forecast``);
* :class:`GatedPredictor` -- the trend predictor behind a confidence gate, shrunk towards
  the cached row and trend-capped; read-only serving (``observe``/``serve``).

Common rules: ``ids`` is a 1-D int64 array of distinct slot ids in range; ``obs`` a
C-contiguous float32 ``[len(ids), dim]`` array; ``mask`` bool/uint8 ``[len(ids)]``; ``t`` a
finite time (the global training step). A call that changes state (``step``, ``observe``)
rejects a ``t`` earlier than a named node's last time. Every call validates all rows before
touching the state, so a call that raises leaves the predictor unchanged. The C++ loops run
without the GIL (calls on one predictor are serialised by a mutex).
"""
import math

import numpy as np
cimport numpy as cnp
from libc.stdint cimport int64_t, uint8_t, uint32_t

cnp.import_array()

cdef extern from "csrc/predictor.hpp" namespace "sni::pred":
    cdef struct NodeMeta:
        pass

    cdef cppclass CTrend "sni::pred::TrendPredictor" nogil:
        @staticmethod
        int64_t stride(int64_t, int64_t)
        CTrend(int64_t, int64_t, int64_t, double, double, double, float*, NodeMeta*) except +
        int step(const int64_t*, int64_t, double, const float*, const uint8_t*, float*, int64_t*)
        int predict_window(const int64_t*, int64_t, double, double, double, double, float*, int64_t*)
        int peek(const int64_t*, int64_t, double, float*, int64_t*)
        int last(const int64_t*, int64_t, float*, int64_t*)
        int last_time(const int64_t*, int64_t, double*, int64_t*)
        int observed(const int64_t*, int64_t, uint8_t*, int64_t*)
        int64_t state_bytes()
        int64_t record_floats()

    cdef cppclass CHolt "sni::pred::HoltPredictor" nogil:
        @staticmethod
        int64_t stride(int64_t)
        CHolt(int64_t, int64_t, double, double, double, float*, NodeMeta*) except +
        int observe(const int64_t*, int64_t, double, const float*, int64_t*)
        int forecast(const int64_t*, int64_t, double, float*, int64_t*)
        int observed(const int64_t*, int64_t, uint8_t*, int64_t*)
        int64_t state_bytes()

    cdef struct GateParams:
        double beta, lam, eps, decay, margin, max_horizon, trend_cap
        int64_t min_compare

    cdef struct GateStats:
        int64_t nodes, compared, open
        double weight_sum

    cdef cppclass CGated "sni::pred::GatedPredictor" nogil:
        @staticmethod
        int64_t stride(int64_t, int64_t)
        CGated(int64_t, int64_t, int64_t, const GateParams&, float*, NodeMeta*) except +
        int observe(const int64_t*, int64_t, double, const float*, int64_t*)
        int serve(const int64_t*, int64_t, double, float*, float*, int64_t*)
        int last(const int64_t*, int64_t, float*, int64_t*)
        int observed(const int64_t*, int64_t, uint8_t*, int64_t*)
        GateStats stats()
        int64_t state_bytes()

    int kOk, kOutOfRange, kDuplicate, kNotObserved, kTimeBackwards
    int64_t kMaxWindow


# ----------------------------------------------------------------------------- checks
cdef object _ids(object ids):
    a = np.asarray(ids)
    if a.dtype != np.int64:
        raise TypeError(f"ids must be an int64 array [n], got dtype {a.dtype}")
    if a.ndim != 1:
        raise ValueError(f"ids must be a 1-D int64 array [n], got shape {a.shape}")
    return np.ascontiguousarray(a)


cdef object _rows(object x, int64_t n, int64_t dim, str name):
    a = np.asarray(x)
    if a.dtype != np.float32:
        raise TypeError(f"{name} must be a float32 array [{n}, {dim}], got dtype {a.dtype}")
    if not a.flags.c_contiguous:
        raise TypeError(f"{name} must be a C-contiguous float32 array [{n}, {dim}]")
    if a.ndim != 2 or a.shape[0] != n or a.shape[1] != dim:
        raise ValueError(f"{name} must have shape [{n}, {dim}] (len(ids), dim), got {a.shape}")
    return a


cdef object _out(object out, int64_t n, int64_t dim, object obs=None):
    if out is None:
        return np.empty((n, dim), dtype=np.float32)
    if not isinstance(out, np.ndarray) or out.dtype != np.float32 or not out.flags.c_contiguous:
        raise TypeError(f"out must be a C-contiguous float32 numpy array [{n}, {dim}]")
    if not out.flags.writeable:
        raise ValueError("out must be writeable")
    if out.ndim != 2 or out.shape[0] != n or out.shape[1] != dim:
        raise ValueError(f"out must have shape [{n}, {dim}] (len(ids), dim), got {out.shape}")
    if obs is not None and np.may_share_memory(out, obs):
        raise ValueError("out must not overlap obs")
    return out


cdef object _mask(object mask, int64_t n):
    a = np.asarray(mask)
    if a.dtype != np.bool_ and a.dtype != np.uint8:
        raise TypeError(f"mask must be a bool or uint8 array [{n}], got dtype {a.dtype}")
    if a.ndim != 1 or a.shape[0] != n:
        raise ValueError(f"mask must have shape [{n}] (len(ids)), got {a.shape}")
    return np.ascontiguousarray(a).view(np.uint8)


cdef double _time(object t) except? -1.0:
    cdef double v = float(t)
    if not math.isfinite(v):
        raise ValueError(f"t must be a finite time, got {t!r}")
    return v


cdef int64_t _check_sizes(int64_t num_nodes, int64_t dim, int64_t window) except -1:
    if num_nodes < 0:
        raise ValueError(f"num_nodes must be >= 0, got {num_nodes}")
    if dim < 1:
        raise ValueError(f"dim must be >= 1, got {dim}")
    if window < 1 or window > kMaxWindow:
        raise ValueError(f"window must lie in [1, {kMaxWindow}], got {window}")
    return 0


cdef _raise(int status, object ids, int64_t bad, int64_t num_nodes, str what, double t):
    cdef int64_t i = ids[bad]
    if status == kOutOfRange:
        raise ValueError(f"{what}: node id {i} out of range [0, {num_nodes})")
    if status == kDuplicate:
        raise ValueError(f"{what}: duplicate node id {i} (ids in one call must be distinct)")
    if status == kNotObserved:
        raise ValueError(f"{what}: node {i} has never been observed (its first call needs an observation)")
    if status == kTimeBackwards:
        raise ValueError(f"{what}: t={t} is earlier than node {i}'s last time")
    raise RuntimeError(f"{what}: unexpected status {status}")


cdef class _Buffers:
    """The state buffers of one predictor, owned by numpy (large numpy allocations are
    advised for transparent huge pages, which keeps random row access off the TLB's
    slow path): ``num_nodes*stride`` float32 records and ``num_nodes`` 16-byte NodeMeta
    (zeroed), both 64-byte aligned."""
    cdef object data, meta
    cdef float* data_ptr
    cdef NodeMeta* meta_ptr

    def __cinit__(self, int64_t num_nodes, int64_t stride):
        self.data = np.empty(num_nodes * stride + 16, dtype=np.float32)
        self.meta = np.zeros(num_nodes * 16 + 64, dtype=np.uint8)
        cdef size_t d = <size_t>cnp.PyArray_DATA(self.data)
        cdef size_t m = <size_t>cnp.PyArray_DATA(self.meta)
        self.data_ptr = <float*>((d + 63) & ~(<size_t>63))
        self.meta_ptr = <NodeMeta*>((m + 63) & ~(<size_t>63))

    def records(self, int64_t num_nodes, int64_t stride):
        """Read-only float32 view ``[num_nodes, stride]`` of the raw records."""
        cdef int64_t off = (<size_t>self.data_ptr - <size_t>cnp.PyArray_DATA(self.data)) // 4
        view = self.data[off:off + num_nodes * stride].reshape(num_nodes, stride)
        view.flags.writeable = False
        return view


cdef inline const int64_t* _iptr(cnp.ndarray a):
    return <const int64_t*>cnp.PyArray_DATA(a)


cdef inline float* _fptr(cnp.ndarray a):
    return <float*>cnp.PyArray_DATA(a)


# ----------------------------------------------------------------------------- trend
cdef class TrendPredictor:
    """The paper's per-node trend predictor.

    ``TrendPredictor(num_nodes, dim, window=4, beta=0.2, lam=0.2, eps=1e-8)``.

    ``step(ids, t, obs=None, mask=None)``: per node, ``dt = t - t_last``,
    ``v = N / max(D, eps)``, ``x_pred = x_last + v*dt*exp(-beta*dt)``; ``x_new`` is the
    observation (every row if ``obs`` is given and ``mask`` is None, else rows where
    ``mask``) or ``x_pred``; ``(x_new, t)`` enters the ring; ``g = exp(-lam*dt)``,
    ``N = g*N + (x_new - x_last)/max(dt, eps)``, ``D = g*D + 1``; returns ``x_pred``.
    A node's first observation initialises it (``N = D = 0``) and is returned as is.

    ``predict_window(ids, t, alpha=0.3, scale=5.0, lam_pred=0.2)``: read-only windowed
    linear-trend prediction over the ring (entries in time order, ``K`` of them):
    ``hbar + dt*Phi*exp(-lam_pred*dt)`` with ``hbar = alpha*H_latest + (1-alpha)*mean(H)``,
    ``Phi`` the ``exp(-|tau_latest - tau_k|/scale)``-weighted mean of the finite
    differences ``(H_k - H_{k-1}) / max(tau_k - tau_{k-1}, eps)`` (0 when ``K == 1``).
    """
    cdef CTrend* c
    cdef _Buffers buf
    cdef readonly int64_t num_nodes, dim, window
    cdef readonly double beta, lam, eps

    def __cinit__(self, int64_t num_nodes, int64_t dim, int64_t window=4, double beta=0.2,
                  double lam=0.2, double eps=1e-8):
        _check_sizes(num_nodes, dim, window)
        if not eps > 0:
            raise ValueError(f"eps must be > 0, got {eps}")
        self.num_nodes, self.dim, self.window = num_nodes, dim, window
        self.beta, self.lam, self.eps = beta, lam, eps
        self.buf = _Buffers(num_nodes, CTrend.stride(dim, window))
        self.c = new CTrend(num_nodes, dim, window, beta, lam, eps, self.buf.data_ptr, self.buf.meta_ptr)

    def __dealloc__(self):
        del self.c

    @property
    def state_bytes_per_row(self):
        """Bytes of state one ``step`` row must read and write (logical, not cache lines):
        read ``x_last`` and ``N`` (``2*dim`` floats) plus ``t_last``, the ring head/fill and
        ``D`` (8+4+4 B); write ``x_new`` and ``N`` (``2*dim`` floats) plus ``t_last``, the
        ring time, ``D`` and head/fill (8+8+4+4 B): ``16*dim + 40``."""
        return 16 * self.dim + 40

    @property
    def window_bytes_per_row(self):
        """Bytes of state one ``predict_window`` row reads with a full ring: the ``window``
        ring rows and times plus head/fill: ``window*(4*dim + 8) + 4``."""
        return self.window * (4 * self.dim + 8) + 4

    @property
    def state_bytes(self):
        """Bytes the compiled state occupies (records incl. padding + metadata)."""
        return self.c.state_bytes()

    @property
    def record_floats(self):
        """Floats per node record (header + N + ring, padded to 64 bytes)."""
        return self.c.record_floats()

    @property
    def _records(self):
        """Read-only raw view of the state records, float32 ``[num_nodes, record_floats]``
        (layout in csrc/predictor.hpp; for benchmarks and debugging)."""
        return self.buf.records(self.num_nodes, self.c.record_floats())

    def step(self, ids, t, obs=None, mask=None, out=None):
        """Self-feeding trend update; returns ``x_pred`` float32 ``[len(ids), dim]`` (written
        into ``out`` if given: C-contiguous float32 ``[len(ids), dim]``, not overlapping obs)."""
        ids = _ids(ids)
        cdef int64_t n = ids.shape[0]
        cdef double tt = _time(t)
        cdef const float* op = NULL
        cdef const uint8_t* mp = NULL
        if obs is not None:
            obs = _rows(obs, n, self.dim, "obs")
            op = _fptr(obs)
            if mask is not None:
                mask = _mask(mask, n)
                mp = <const uint8_t*>cnp.PyArray_DATA(mask)
        elif mask is not None:
            raise ValueError("mask given without obs")
        out = _out(out, n, self.dim, obs)
        cdef int64_t bad = -1
        cdef int st
        cdef const int64_t* ip = _iptr(ids)
        cdef float* yp = _fptr(out)
        with nogil:
            st = self.c.step(ip, n, tt, op, mp, yp, &bad)
        if st != kOk:
            _raise(st, ids, bad, self.num_nodes, "step", tt)
        return out

    def peek(self, ids, t, out=None):
        """What ``step(ids, t)`` without observations would return, without changing state
        (no self-feeding); float32 ``[n, dim]``."""
        ids = _ids(ids)
        cdef int64_t n = ids.shape[0]
        cdef double tt = _time(t)
        out = _out(out, n, self.dim)
        cdef int64_t bad = -1
        cdef int st
        cdef const int64_t* ip = _iptr(ids)
        cdef float* yp = _fptr(out)
        with nogil:
            st = self.c.peek(ip, n, tt, yp, &bad)
        if st != kOk:
            _raise(st, ids, bad, self.num_nodes, "peek", tt)
        return out

    def predict_window(self, ids, t, double alpha=0.3, double scale=5.0, double lam_pred=0.2, out=None):
        """Windowed linear-trend prediction at time ``t`` (read-only); float32 ``[n, dim]``
        (written into ``out`` if given)."""
        if not scale > 0:
            raise ValueError(f"scale must be > 0, got {scale}")
        ids = _ids(ids)
        cdef int64_t n = ids.shape[0]
        cdef double tt = _time(t)
        out = _out(out, n, self.dim)
        cdef int64_t bad = -1
        cdef int st
        cdef const int64_t* ip = _iptr(ids)
        cdef float* yp = _fptr(out)
        with nogil:
            st = self.c.predict_window(ip, n, tt, alpha, scale, lam_pred, yp, &bad)
        if st != kOk:
            _raise(st, ids, bad, self.num_nodes, "predict_window", tt)
        return out

    def last(self, ids):
        """``x_last`` rows (the latest ring entry), float32 ``[n, dim]``."""
        ids = _ids(ids)
        cdef int64_t n = ids.shape[0]
        out = np.empty((n, self.dim), dtype=np.float32)
        cdef int64_t bad = -1
        cdef int st = self.c.last(_iptr(ids), n, _fptr(out), &bad)
        if st != kOk:
            _raise(st, ids, bad, self.num_nodes, "last", 0.0)
        return out

    def last_time(self, ids):
        """``t_last`` per id, float64 ``[n]`` (NaN for never-observed nodes)."""
        ids = _ids(ids)
        cdef int64_t n = ids.shape[0]
        out = np.empty(n, dtype=np.float64)
        cdef int64_t bad = -1
        cdef int st = self.c.last_time(_iptr(ids), n, <double*>cnp.PyArray_DATA(out), &bad)
        if st != kOk:
            _raise(st, ids, bad, self.num_nodes, "last_time", 0.0)
        return out

    def observed(self, ids):
        """Whether each node has been observed, bool ``[n]``."""
        ids = _ids(ids)
        cdef int64_t n = ids.shape[0]
        out = np.empty(n, dtype=np.bool_)
        cdef int64_t bad = -1
        cdef int st = self.c.observed(_iptr(ids), n, <uint8_t*>cnp.PyArray_DATA(out), &bad)
        if st != kOk:
            _raise(st, ids, bad, self.num_nodes, "observed", 0.0)
        return out

    def __repr__(self):
        return (f"TrendPredictor(num_nodes={self.num_nodes}, dim={self.dim}, window={self.window}, "
                f"beta={self.beta}, lam={self.lam}, eps={self.eps})")


# ----------------------------------------------------------------------------- holt
cdef class HoltPredictor:
    """Holt's double exponential smoothing per node (level ``l``, trend ``b``).

    ``HoltPredictor(num_nodes, dim, alpha=0.5, beta_trend=0.3, eps=1e-8)``.
    ``observe(ids, t, obs)``: first observation ``l = obs, b = 0``; later, with ``dt`` since
    the last, ``l_pred = l + b*dt``, ``l = alpha*obs + (1-alpha)*l_pred``,
    ``b = beta_trend*(l - l_prev)/max(dt, eps) + (1-beta_trend)*b``.
    ``forecast(ids, t) = l + b*(t - t_last)`` (read-only).
    """
    cdef CHolt* c
    cdef _Buffers buf
    cdef readonly int64_t num_nodes, dim
    cdef readonly double alpha, beta_trend, eps

    def __cinit__(self, int64_t num_nodes, int64_t dim, double alpha=0.5, double beta_trend=0.3,
                  double eps=1e-8):
        _check_sizes(num_nodes, dim, 1)
        if not eps > 0:
            raise ValueError(f"eps must be > 0, got {eps}")
        self.num_nodes, self.dim = num_nodes, dim
        self.alpha, self.beta_trend, self.eps = alpha, beta_trend, eps
        self.buf = _Buffers(num_nodes, CHolt.stride(dim))
        self.c = new CHolt(num_nodes, dim, alpha, beta_trend, eps, self.buf.data_ptr, self.buf.meta_ptr)

    def __dealloc__(self):
        del self.c

    @property
    def state_bytes(self):
        return self.c.state_bytes()

    def observe(self, ids, t, obs):
        """Fold observations ``obs`` (float32 ``[n, dim]``) taken at time ``t`` into the state."""
        ids = _ids(ids)
        cdef int64_t n = ids.shape[0]
        cdef double tt = _time(t)
        obs = _rows(obs, n, self.dim, "obs")
        cdef int64_t bad = -1
        cdef int st
        cdef const int64_t* ip = _iptr(ids)
        cdef const float* op = _fptr(obs)
        with nogil:
            st = self.c.observe(ip, n, tt, op, &bad)
        if st != kOk:
            _raise(st, ids, bad, self.num_nodes, "observe", tt)

    def forecast(self, ids, t, out=None):
        """``l + b*(t - t_last)``, float32 ``[n, dim]`` (written into ``out`` if given)."""
        ids = _ids(ids)
        cdef int64_t n = ids.shape[0]
        cdef double tt = _time(t)
        out = _out(out, n, self.dim)
        cdef int64_t bad = -1
        cdef int st
        cdef const int64_t* ip = _iptr(ids)
        cdef float* yp = _fptr(out)
        with nogil:
            st = self.c.forecast(ip, n, tt, yp, &bad)
        if st != kOk:
            _raise(st, ids, bad, self.num_nodes, "forecast", tt)
        return out

    def observed(self, ids):
        ids = _ids(ids)
        cdef int64_t n = ids.shape[0]
        out = np.empty(n, dtype=np.bool_)
        cdef int64_t bad = -1
        cdef int st = self.c.observed(_iptr(ids), n, <uint8_t*>cnp.PyArray_DATA(out), &bad)
        if st != kOk:
            _raise(st, ids, bad, self.num_nodes, "observed", 0.0)
        return out

    def __repr__(self):
        return (f"HoltPredictor(num_nodes={self.num_nodes}, dim={self.dim}, alpha={self.alpha}, "
                f"beta_trend={self.beta_trend}, eps={self.eps})")


# ----------------------------------------------------------------------------- gated
cdef class GatedPredictor:
    """Trend predictor behind a confidence gate; never served unless it beat the cache.

    ``GatedPredictor(num_nodes, dim, window=4, beta=0.2, lam=0.2, eps=1e-8, decay=0.5,
    margin=0.1, min_compare=2, max_horizon=10, trend_cap=2.0)``.

    ``observe(ids, t, obs)`` (sync epochs): for an initialised node, first scores the
    prediction ``p`` it would serve at ``t`` against the cached row ``c`` (last
    observation): with ``e = obs - c``, ``d = p - c`` and ``g = decay``,
    ``A = g*A + <e,d>``, ``B = g*B + <d,d>``, ``Ep = g*Ep + |p-obs|^2``,
    ``Ec = g*Ec + |c-obs|^2``, ``n_cmp += 1``; then applies the trend update with the
    observation (as ``TrendPredictor.step``) and sets ``s = |obs - c| / max(dt, eps)``.

    ``serve(ids, t) -> (rows, w)``, read-only: ``dt = min(t - t_last, max_horizon)``,
    ``v = N/max(D, eps)`` scaled down to norm ``trend_cap*s`` if longer,
    ``p = c + v*dt*exp(-beta*dt)``, ``w = clip(A/B, 0, 1)*(1 - margin)`` if
    ``n_cmp >= min_compare``, ``B > 0`` and ``Ep < (1 - margin) * Ec``, else 0; ``rows = c + w*(p - c)``.
    """
    cdef CGated* c
    cdef _Buffers buf
    cdef GateParams P
    cdef readonly int64_t num_nodes, dim, window

    def __cinit__(self, int64_t num_nodes, int64_t dim, int64_t window=4, double beta=0.2,
                  double lam=0.2, double eps=1e-8, double decay=0.5, double margin=0.1,
                  int64_t min_compare=2, double max_horizon=10, double trend_cap=2.0):
        _check_sizes(num_nodes, dim, window)
        if not eps > 0:
            raise ValueError(f"eps must be > 0, got {eps}")
        if not 0 <= decay <= 1:
            raise ValueError(f"decay must lie in [0, 1], got {decay}")
        if not 0 <= margin <= 1:
            raise ValueError(f"margin must lie in [0, 1], got {margin}")
        if not max_horizon >= 0 or not trend_cap >= 0:
            raise ValueError("max_horizon and trend_cap must be >= 0")
        self.num_nodes, self.dim, self.window = num_nodes, dim, window
        self.P.beta, self.P.lam, self.P.eps = beta, lam, eps
        self.P.decay, self.P.margin, self.P.min_compare = decay, margin, min_compare
        self.P.max_horizon, self.P.trend_cap = max_horizon, trend_cap
        self.buf = _Buffers(num_nodes, CGated.stride(dim, window))
        self.c = new CGated(num_nodes, dim, window, self.P, self.buf.data_ptr, self.buf.meta_ptr)

    def __dealloc__(self):
        del self.c

    @property
    def params(self):
        """The gate's parameters as a dict."""
        return dict(beta=self.P.beta, lam=self.P.lam, eps=self.P.eps, decay=self.P.decay,
                    margin=self.P.margin, min_compare=self.P.min_compare,
                    max_horizon=self.P.max_horizon, trend_cap=self.P.trend_cap)

    @property
    def state_bytes(self):
        return self.c.state_bytes()

    def observe(self, ids, t, obs):
        """Score, then fold in, observations ``obs`` (float32 ``[n, dim]``) taken at ``t``."""
        ids = _ids(ids)
        cdef int64_t n = ids.shape[0]
        cdef double tt = _time(t)
        obs = _rows(obs, n, self.dim, "obs")
        cdef int64_t bad = -1
        cdef int st
        cdef const int64_t* ip = _iptr(ids)
        cdef const float* op = _fptr(obs)
        with nogil:
            st = self.c.observe(ip, n, tt, op, &bad)
        if st != kOk:
            _raise(st, ids, bad, self.num_nodes, "observe", tt)

    def serve(self, ids, t, out=None):
        """``(rows float32 [n, dim], w float32 [n])``; ``w > 0``: served from the predictor.
        Rows are written into ``out`` if given."""
        ids = _ids(ids)
        cdef int64_t n = ids.shape[0]
        cdef double tt = _time(t)
        out = _out(out, n, self.dim)
        w = np.empty(n, dtype=np.float32)
        cdef int64_t bad = -1
        cdef int st
        cdef const int64_t* ip = _iptr(ids)
        cdef float* yp = _fptr(out)
        cdef float* wp = _fptr(w)
        with nogil:
            st = self.c.serve(ip, n, tt, yp, wp, &bad)
        if st != kOk:
            _raise(st, ids, bad, self.num_nodes, "serve", tt)
        return out, w

    def last(self, ids):
        """The cached rows (last observations), float32 ``[n, dim]``."""
        ids = _ids(ids)
        cdef int64_t n = ids.shape[0]
        out = np.empty((n, self.dim), dtype=np.float32)
        cdef int64_t bad = -1
        cdef int st = self.c.last(_iptr(ids), n, _fptr(out), &bad)
        if st != kOk:
            _raise(st, ids, bad, self.num_nodes, "last", 0.0)
        return out

    def observed(self, ids):
        ids = _ids(ids)
        cdef int64_t n = ids.shape[0]
        out = np.empty(n, dtype=np.bool_)
        cdef int64_t bad = -1
        cdef int st = self.c.observed(_iptr(ids), n, <uint8_t*>cnp.PyArray_DATA(out), &bad)
        if st != kOk:
            _raise(st, ids, bad, self.num_nodes, "observed", 0.0)
        return out

    def gate_stats(self):
        """Counts over all tracked nodes: ``nodes`` (observed), ``compared``
        (``n_cmp >= min_compare``), ``open`` (``w > 0``), ``mean_weight`` (mean ``w`` over
        observed nodes) and ``mean_open_weight`` (mean ``w`` over open ones)."""
        cdef GateStats g
        with nogil:
            g = self.c.stats()
        return {"nodes": int(g.nodes), "compared": int(g.compared), "open": int(g.open),
                "mean_weight": g.weight_sum / g.nodes if g.nodes else 0.0,
                "mean_open_weight": g.weight_sum / g.open if g.open else 0.0}

    def __repr__(self):
        p = ", ".join(f"{k}={v}" for k, v in self.params.items())
        return f"GatedPredictor(num_nodes={self.num_nodes}, dim={self.dim}, window={self.window}, {p})"


# ----------------------------------------------------------------------------- tables
cdef extern from "csrc/tables.hpp" namespace "sni::table":
    cdef struct TableParams:
        int64_t window
        double beta, lam

    cdef cppclass CTable "sni::table::HistoryTable" nogil:
        CTable(int64_t, int64_t, const uint8_t*, uint32_t, const TableParams&) except +ValueError
        void observe(double, const float*, int64_t, const int64_t*) except +ValueError
        void serve(double, bint, float*, float*) except +ValueError
        void drift(double, float*) except +ValueError
        int64_t num_rows()
        int64_t dim()
        int64_t predicted_slots()
        double predictor_s()
        const float* cache()

KIND_CODES = {"cache": 0, "linear-trend": 1, "gated": 2, "holt": 3, "window-trend": 4}  # csrc/tables.hpp Kind


cdef class TableCore:
    """The C++ history table (``csrc/tables.hpp``) that the inline agent and the ``sni-agent``
    binary share: ``TableCore(num_rows, dim, sampled, kind, window=4, beta=0.2, lam=0.2)``.
    Wrapped by :class:`dpu_agent.tables.HistoryTable`; calls release the GIL."""
    cdef CTable* c
    cdef readonly int64_t num_rows, dim

    def __cinit__(self, int64_t num_rows, int64_t dim, sampled, str kind, int64_t window=4,
                  double beta=0.2, double lam=0.2):
        if kind not in KIND_CODES:
            raise ValueError(f"unknown predictor '{kind}': choose one of {', '.join(KIND_CODES)}")
        mask = np.ascontiguousarray(np.asarray(sampled, dtype=bool)).view(np.uint8)
        if mask.shape != (num_rows,):
            raise ValueError(f"sampled mask must have shape ({num_rows},), got {mask.shape}")
        cdef TableParams p
        p.window, p.beta, p.lam = window, beta, lam
        cdef const uint8_t* mp = <const uint8_t*>cnp.PyArray_DATA(mask)
        self.c = new CTable(num_rows, dim, mp, KIND_CODES[kind], p)
        self.num_rows, self.dim = num_rows, dim

    def __dealloc__(self):
        del self.c

    @property
    def predictor_s(self):
        return self.c.predictor_s()

    @property
    def predicted_slots(self):
        return self.c.predicted_slots()

    @property
    def cache(self):
        """A copy of the history cache, float32 ``[num_rows, dim]``."""
        out = np.empty((self.num_rows, self.dim), dtype=np.float32)
        if out.size:
            memcpy_rows(out, self.c.cache())
        return out

    def observe(self, double step, rows, row_ids=None):
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        cdef int64_t count = rows.shape[0] if rows.ndim == 2 else -1
        if rows.ndim != 2 or rows.shape[1] != self.dim:
            n = self.num_rows if row_ids is None else np.asarray(row_ids).size
            raise ValueError(f"observe needs rows of shape ({n}, {self.dim}), got {rows.shape}")
        cdef const int64_t* ip = NULL
        if row_ids is not None:
            ids = np.ascontiguousarray(row_ids, dtype=np.int64)
            if ids.ndim != 1 or ids.shape[0] != count:
                raise ValueError(f"observe needs rows of shape ({ids.size}, {self.dim}), got {rows.shape}")
            ip = _iptr(ids)
        cdef const float* rp = _fptr(rows)
        with nogil:
            self.c.observe(step, rp, count, ip)

    def serve(self, double step, bint preview=False):
        out = np.empty((self.num_rows, self.dim), dtype=np.float32)
        w = np.empty(self.num_rows, dtype=np.float32)
        cdef float* op = _fptr(out)
        cdef float* wp = _fptr(w)
        with nogil:
            self.c.serve(step, preview, op, wp)
        return out, w

    def drift(self, double step):
        out = np.empty(self.num_rows, dtype=np.float32)
        cdef float* op = _fptr(out)
        with nogil:
            self.c.drift(step, op)
        return out


cdef extern from "<cstring>":
    void* memcpy(void*, const void*, size_t)


cdef memcpy_rows(cnp.ndarray out, const float* src):
    memcpy(cnp.PyArray_DATA(out), src, out.nbytes)

# cython: boundscheck=False, wraparound=False, cdivision=True
"""Compiled core of the agent: its history tables and their predictor cores (``csrc/tables.hpp``
over ``csrc/predictor.hpp``).

* :class:`TableCore` -- one history table (cache, speeds, a predictor over the sampled rows),
  wrapped by :class:`dpu_agent.tables.HistoryTable`;
* :class:`PredictorCore` -- one table's predictor core alone (``make_core``), driven exactly as
  the tables drive it: ``observe`` folds in synced rows, ``serve`` predicts rows and weights.

Predictor rules: ``ids`` is a 1-D int64 array of distinct slot ids in ``0 .. num_nodes-1``;
``rows`` a C-contiguous float32 ``[len(ids), dim]`` array; ``t`` a finite time (the global
training step). A call that changes state rejects a ``t`` earlier than a named node's last
time. Every call validates all rows before touching the state, so a call that raises leaves
the core unchanged. The C++ loops run without the GIL (calls on one core are serialised by a
mutex).
"""
import math

import numpy as np
cimport numpy as cnp
from libc.stdint cimport int64_t, uint8_t, uint32_t
from libcpp cimport bool as cbool
from libcpp.memory cimport unique_ptr
from libcpp.string cimport string

cnp.import_array()

cdef extern from "csrc/predictor.hpp" namespace "sni::pred":
    int kOk

cdef extern from "csrc/tables.hpp" namespace "sni::table":
    cdef struct TableParams:
        int64_t window
        double beta, lam

    cdef cppclass CCore "sni::table::Core" nogil:
        cbool self_feeding()
        int observe(const int64_t*, int64_t, double, const float*, int64_t*)
        int serve(const int64_t*, int64_t, double, cbool, float*, float*, int64_t*)
        int64_t record_floats()

    unique_ptr[CCore] make_core(uint32_t, int64_t, int64_t, const TableParams&) except +ValueError
    string status_text(int, const char*, int64_t, int64_t, double)

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


cdef double _time(object t) except? -1.0:
    cdef double v = float(t)
    if not math.isfinite(v):
        raise ValueError(f"t must be a finite time, got {t!r}")
    return v


cdef _fail(int status, const char* what, object ids, int64_t bad, int64_t num_nodes, double t):
    """Raise the C++ core's own words for a failed call (tables.hpp ``status_text``)."""
    cdef int64_t i = ids[bad]
    raise ValueError(status_text(status, what, i, num_nodes, t).decode())


cdef inline const int64_t* _iptr(cnp.ndarray a):
    return <const int64_t*>cnp.PyArray_DATA(a)


cdef inline float* _fptr(cnp.ndarray a):
    return <float*>cnp.PyArray_DATA(a)


# ----------------------------------------------------------------------------- predictors
cdef class PredictorCore:
    """One history table's predictor core (``csrc/tables.hpp`` ``make_core``) over slot ids
    ``0 .. num_nodes-1``, owning its state: ``PredictorCore(kind, num_nodes, dim, window=4,
    beta=0.2, lam=0.2)``. The tables drive the same C++ object through :class:`TableCore`;
    this binding gives it to the tests (against ``tests/dpu_agent/numpy_ref.py``) and the
    agent's benchmark suite. Per kind (``csrc/predictor.hpp`` defines the predictors):

    * ``linear-trend``: the paper's self-feeding trend predictor. ``observe`` is a trend step
      with the rows; ``serve`` the step without them (the prediction is fed back, so the
      state advances: serve a node at most once per ``t``); ``preview`` computes the same
      rows without changing anything;
    * ``window-trend``: the trend state fed the observations only; ``serve`` is the read-only
      windowed linear trend over the ring (alpha 0.3, scale 5, horizon decay ``lam``);
    * ``gated``: the trend predictor behind a confidence gate (``beta`` 0, decay 0.5, margin
      0.1, max_horizon 10, trend_cap 2, min_compare 2; the given ``beta`` is not used); ``serve``
      is read-only and its weights are the gate's (0: the last observation, as is);
    * ``holt``: Holt's double exponential smoothing (alpha 0.5, beta_trend 0.3; ``window``,
      ``beta`` and ``lam`` are not used); ``serve`` is the read-only forecast.

    ``serve`` returns ``(rows float32 [n, dim], weights float32 [n])``; the weight is 1 for
    every kind but ``gated``. A node's first observation initialises it; serving a node never
    observed is an error.
    """
    cdef unique_ptr[CCore] c
    cdef readonly str kind
    cdef readonly int64_t num_nodes, dim, window
    cdef readonly double beta, lam

    def __cinit__(self, str kind, int64_t num_nodes, int64_t dim, int64_t window=4, double beta=0.2,
                  double lam=0.2):
        if kind not in KIND_CODES:
            raise ValueError(f"unknown predictor '{kind}': choose one of {', '.join(KIND_CODES)}")
        if kind == "cache":
            raise ValueError("'cache' has no predictor core: it serves the history cache alone")
        cdef TableParams p
        p.window, p.beta, p.lam = window, beta, lam
        self.c.reset(make_core(KIND_CODES[kind], num_nodes, dim, p).release())
        self.kind = kind
        self.num_nodes, self.dim, self.window = num_nodes, dim, window
        self.beta, self.lam = beta, lam

    @property
    def self_feeding(self):
        """Whether ``serve`` advances the state (``linear-trend``): a table serves such a core at
        most once per step and does not feed it observations at a step it has served."""
        return self.c.get().self_feeding()

    @property
    def record_floats(self):
        """Floats of one node's state record (a multiple of 16: 64-byte records)."""
        return self.c.get().record_floats()

    def observe(self, ids, t, rows):
        """Fold ``rows`` (float32 ``[len(ids), dim]``) synced at time ``t`` into the state."""
        ids = _ids(ids)
        cdef int64_t n = ids.shape[0]
        cdef double tt = _time(t)
        rows = _rows(rows, n, self.dim, "rows")
        cdef int64_t bad = -1
        cdef int st
        cdef const int64_t* ip = _iptr(ids)
        cdef const float* rp = _fptr(rows)
        cdef CCore* core = self.c.get()
        with nogil:
            st = core.observe(ip, n, tt, rp, &bad)
        if st != kOk:
            _fail(st, b"observe", ids, bad, self.num_nodes, tt)

    def serve(self, ids, t, bint preview=False):
        """``(rows, weights)`` predicted for ``ids`` at time ``t``; ``preview`` changes no state."""
        ids = _ids(ids)
        cdef int64_t n = ids.shape[0]
        cdef double tt = _time(t)
        out = np.empty((n, self.dim), dtype=np.float32)
        w = np.empty(n, dtype=np.float32)
        cdef int64_t bad = -1
        cdef int st
        cdef const int64_t* ip = _iptr(ids)
        cdef float* yp = _fptr(out)
        cdef float* wp = _fptr(w)
        cdef CCore* core = self.c.get()
        with nogil:
            st = core.serve(ip, n, tt, preview, yp, wp, &bad)
        if st != kOk:
            _fail(st, b"serve", ids, bad, self.num_nodes, tt)
        return out, w

    def __repr__(self):
        return (f"PredictorCore({self.kind!r}, num_nodes={self.num_nodes}, dim={self.dim}, "
                f"window={self.window}, beta={self.beta}, lam={self.lam})")


# ----------------------------------------------------------------------------- tables
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

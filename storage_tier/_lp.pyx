# cython: boundscheck=False, wraparound=False, cdivision=True
"""Compiled core of the switching-aware partitioner (see csrc/label_prop.hpp).

Low level: arguments are assumed validated by :mod:`storage_tier.partitioner`, except for
the dtype/contiguity checks done here, which guard the raw pointers.
"""
import numpy as np
cimport numpy as cnp
from libc.stdint cimport int64_t, uint64_t
from libcpp cimport bool as cbool

cdef extern from "storage_tier/csrc/label_prop.hpp" namespace "sni::lp":
    cdef cppclass Options:
        int64_t num_parts
        int64_t levels
        double balance
        double lam
        int64_t max_iter
        int64_t refine_iter
        int64_t patience
        double tol
        int64_t chunks
        uint64_t seed
        int64_t use_init

    cdef cppclass Stats:
        int64_t iterations
        int64_t capacity
        int64_t start_cut
        int64_t final_cut
        int64_t restored_start
        int64_t stop_reason
        int64_t entries

    cdef cppclass History:
        int64_t* labels
        int64_t* cut
        int64_t* moves
        int64_t capacity

    int run_dispatch(const int64_t* indptr, const void* indices, int idx_bytes, int64_t n,
                     void* dstpart, int part_bytes, int64_t* part, const Options& o,
                     History* h, Stats* st) nogil
    int check_csr_dispatch(const int64_t* indptr, const void* indices, int idx_bytes, int64_t n,
                           int64_t m, int64_t* where) nogil
    int coo_indptr_dispatch(const void* src, const void* dst, int id_bytes, int64_t m, int64_t n,
                            cbool both, int64_t* indptr, int64_t* where, int* sorted) nogil
    void coo_scatter_dispatch(const void* src, const void* dst, int id_bytes, int64_t m, int64_t n,
                              cbool both, const int64_t* indptr, void* indices, int out_bytes) nogil


STOP_REASONS = ("max_iter", "no_move", "plateau", "restored_start")


cdef inline void* _ptr(cnp.ndarray a) noexcept nogil:
    return cnp.PyArray_DATA(a)


def _need(a, dtypes, name):
    if not isinstance(a, np.ndarray) or a.ndim != 1 or not a.flags.c_contiguous:
        raise TypeError(f"{name} must be a 1-D C-contiguous numpy array")
    if a.dtype not in dtypes:
        raise TypeError(f"{name} must have dtype {' or '.join(str(np.dtype(d)) for d in dtypes)}, got {a.dtype}")


def part_dtype(int64_t num_parts):
    """The smallest dtype that holds part ids ``0 .. num_parts - 1`` (dstpart's type)."""
    if num_parts <= 256:
        return np.dtype(np.uint8)
    if num_parts <= 65536:
        return np.dtype(np.uint16)
    return np.dtype(np.int32)


def check_csr(indptr, indices):
    """``(code, where)``: 0 if the CSR is valid; see ``check_csr`` in label_prop.hpp."""
    _need(indptr, (np.int64,), "indptr")
    _need(indices, (np.int32, np.int64), "indices")
    cdef int64_t n = indptr.shape[0] - 1, m = indices.shape[0], where = -1
    cdef int ib = indices.dtype.itemsize, code
    cdef cnp.ndarray ip = indptr, ix = indices
    with nogil:
        code = check_csr_dispatch(<const int64_t*>_ptr(ip), _ptr(ix), ib, n, m, &where)
    return code, where


def run(indptr, indices, int64_t num_parts, int64_t levels=0, double balance=1.1, double lam=0.5,
        int64_t max_iter=50, int64_t refine_iter=10, int64_t patience=8, double tol=1e-3,
        int64_t chunks=8, uint64_t seed=0, init=None):
    """Run the partitioner; returns ``(parts, history, stats)``.

    ``history``: int64 ``[entries, 3]`` rows ``(labels, cut, moves)`` -- a phase start
    (moves -1) or an iteration; cuts count CSR entries. ``stats``: a dict. ``init``
    (optional) is copied and used as the start (levels must then be 0).
    """
    _need(indptr, (np.int64,), "indptr")
    _need(indices, (np.int32, np.int64), "indices")
    cdef int64_t n = indptr.shape[0] - 1, m = indices.shape[0]
    # cheap guards against what would corrupt memory; the O(|E|) check is check_csr's
    if n < 1 or not 1 <= num_parts <= n:
        raise ValueError(f"need 1 <= num_parts <= num_nodes, got {num_parts} and {n}")
    if indptr[0] != 0 or indptr[n] != m:
        raise ValueError("indptr must start at 0 and end at len(indices)")
    if levels < 0 or max_iter < 0 or refine_iter < 0 or patience < 1 or chunks < 1:
        raise ValueError("levels, max_iter, refine_iter >= 0 and patience, chunks >= 1 required")
    if levels and (levels > 20 or (num_parts << levels) > 4096):
        raise ValueError(f"levels={levels} gives too many labels for the label pairing")
    cdef int64_t labels = num_parts << levels
    cdef cnp.ndarray parts
    if init is None:
        parts = np.empty(n, dtype=np.int64)
    else:
        if levels:
            raise ValueError("an initial assignment needs levels=0")
        start = np.array(init, dtype=np.int64, copy=True)
        if start.ndim != 1 or start.shape[0] != n:
            raise ValueError(f"init must hold one part id per vertex ({n}), got shape {start.shape}")
        if n and (start.min() < 0 or start.max() >= num_parts):
            raise ValueError(f"init holds part ids outside [0, {num_parts})")
        parts = start
    cdef cnp.ndarray dstpart = np.empty(m, dtype=part_dtype(labels))
    cdef int64_t cap_entries = 2 + max_iter * 2 + levels * (refine_iter + 1)
    cdef cnp.ndarray hist = np.zeros((3, cap_entries), dtype=np.int64)
    cdef cnp.ndarray ip = indptr, ix = indices
    cdef Options o
    o.num_parts = num_parts
    o.levels = levels
    o.balance = balance
    o.lam = lam
    o.max_iter = max_iter
    o.refine_iter = refine_iter
    o.patience = patience
    o.tol = tol
    o.chunks = chunks
    o.seed = seed
    o.use_init = init is not None
    cdef History h
    h.labels = <int64_t*>_ptr(hist)
    h.cut = h.labels + cap_entries
    h.moves = h.cut + cap_entries
    h.capacity = cap_entries
    cdef Stats st
    cdef int ib = indices.dtype.itemsize, pb = dstpart.dtype.itemsize, rc
    with nogil:
        rc = run_dispatch(<const int64_t*>_ptr(ip), _ptr(ix), ib, n, _ptr(dstpart), pb,
                          <int64_t*>_ptr(parts), o, &h, &st)
    if rc != 0:
        raise TypeError(f"unsupported dtype combination: indices {indices.dtype}, parts {dstpart.dtype}")
    del dstpart
    entries = min(st.entries, cap_entries)
    return parts, hist[:, :entries].T.copy(), dict(
        iterations=int(st.iterations), capacity=int(st.capacity), start_cut=int(st.start_cut),
        final_cut=int(st.final_cut), restored_start=bool(st.restored_start),
        stop_reason=STOP_REASONS[st.stop_reason], dstpart_dtype=str(part_dtype(labels)))


def coo_to_csr(src, dst, int64_t num_nodes, bint symmetrize=False, index_dtype=None):
    """CSR ``(indptr, indices)`` of the COO edges by counting sort, O(|V|) scratch.

    If ``src`` is already sorted and no symmetrisation is asked for, ``indices`` is ``dst``
    itself (no copy). Otherwise ``indices`` has ``index_dtype`` (default int32 when the
    ids fit). Raises ValueError naming the first out-of-range edge.
    """
    _need(src, (np.int32, np.int64), "src")
    _need(dst, (src.dtype,), "dst")
    if src.shape[0] != dst.shape[0]:
        raise ValueError(f"src has {src.shape[0]} entries but dst has {dst.shape[0]}")
    cdef int64_t m = src.shape[0], n = num_nodes, where = -1
    cdef cnp.ndarray indptr = np.empty(n + 1, dtype=np.int64)
    cdef cnp.ndarray sa = src, da = dst
    cdef int ib = src.dtype.itemsize, code, is_sorted = 0
    with nogil:
        code = coo_indptr_dispatch(_ptr(sa), _ptr(da), ib, m, n, symmetrize,
                                   <int64_t*>_ptr(indptr), &where, &is_sorted)
    if code:
        raise ValueError(f"edge {where} ({src[where]} -> {dst[where]}) has a node id outside "
                         f"[0, {n})")
    if is_sorted and not symmetrize and (index_dtype is None or np.dtype(index_dtype) == dst.dtype):
        return indptr, dst
    if index_dtype is None:
        index_dtype = np.int32 if n <= np.iinfo(np.int32).max else np.int64
    index_dtype = np.dtype(index_dtype)
    if index_dtype not in (np.dtype(np.int32), np.dtype(np.int64)):
        raise TypeError(f"index_dtype must be int32 or int64, got {index_dtype}")
    cdef cnp.ndarray indices = np.empty(indptr[n], dtype=index_dtype)
    cdef int ob = index_dtype.itemsize
    with nogil:
        coo_scatter_dispatch(_ptr(sa), _ptr(da), ib, m, n, symmetrize, <const int64_t*>_ptr(indptr),
                             _ptr(indices), ob)
    return indptr, indices

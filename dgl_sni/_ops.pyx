# cython: boundscheck=False, wraparound=False, cdivision=True
"""Compiled trainer kernels (see csrc/): keyed dropout."""
import numpy as np
cimport numpy as cnp
from libc.stdint cimport int64_t, uint64_t, uint32_t

cdef extern from "csrc/keyed_dropout.hpp" namespace "sni":
    void keyed_dropout(const float* x, float* y, int64_t rows, int64_t cols,
                       const int64_t* keys, uint64_t seed, uint32_t threshold, float scale) nogil


def keyed_dropout_into(x, out, keys, uint64_t seed, double p):
    """``out = x * mask / (1 - p)`` with the mask a function of ``(seed, keys[row], col)``.

    ``x`` and ``out``: C-contiguous float32 of the same shape ``[rows, ...]``; ``keys``:
    int64 ``[rows]``. ``out`` may be ``x``.
    """
    if x.dtype != np.float32 or out.dtype != np.float32:
        raise TypeError("keyed dropout works on float32 arrays")
    if keys.dtype != np.int64:
        raise TypeError("keyed dropout keys must be int64")
    if not (x.flags.c_contiguous and out.flags.c_contiguous and keys.flags.c_contiguous):
        raise ValueError("keyed dropout needs C-contiguous arrays")
    if x.ndim < 1 or x.shape != out.shape:
        raise ValueError(f"shape mismatch: x {x.shape} vs out {out.shape}")
    if keys.ndim != 1 or keys.shape[0] != x.shape[0]:
        raise ValueError(f"need one key per row: {x.shape[0]} rows, {keys.shape[0]} keys")
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability must lie in [0, 1), got {p}")
    cdef cnp.ndarray xa = x, oa = out, ka = keys
    cdef int64_t rows = x.shape[0]
    cdef int64_t cols = x.size // rows if rows else 0
    cdef uint32_t threshold = <uint32_t>min(p * 4294967296.0, 4294967295.0)
    cdef float scale = <float>(1.0 / (1.0 - p))
    with nogil:
        keyed_dropout(<const float*>cnp.PyArray_DATA(xa), <float*>cnp.PyArray_DATA(oa), rows, cols,
                      <const int64_t*>cnp.PyArray_DATA(ka), seed, threshold, scale)
    return out

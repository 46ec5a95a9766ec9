# cython: boundscheck=False, wraparound=False, cdivision=True
"""Compiled trainer kernels (see csrc/): keyed dropout, the low-bit row codec, the float rows' accumulate,
narrow products."""
import numpy as np
cimport numpy as cnp
from libc.stdint cimport int64_t, uint64_t, uint32_t, uint8_t

cdef extern from "csrc/keyed_dropout.hpp" namespace "sni":
    void keyed_dropout(const float* x, float* y, int64_t rows, int64_t cols,
                       const int64_t* keys, uint64_t seed, uint32_t threshold, float scale) nogil

cdef extern from "csrc/narrow_matmul.hpp" namespace "sni":
    void narrow_matmul(const float* x, int64_t n, int64_t k, const float* w, int64_t m, float* out) nogil
    void narrow_outer(const float* x, int64_t n, int64_t k, const float* g, int64_t m, float* out) nogil

cdef extern from "csrc/row_accumulate.hpp" namespace "sni":
    void accumulate_float_rows(const float* x, int64_t n, int64_t d, const int64_t* offsets, double* target) nogil

cdef extern from "csrc/row_codec.hpp" namespace "sni":
    void encode_rows(const float* x, int64_t n, int64_t d, int bits, const float* dither,
                     uint8_t* out, int64_t width) nogil
    void decode_rows(const uint8_t* packed, int64_t n, int64_t d, int bits, int64_t width, float* out) nogil
    void accumulate_rows(const uint8_t* packed, int64_t n, int64_t d, int bits, int64_t width,
                         const int64_t* offsets, double* target) nogil


def _c_array(a, dtype, what):
    """Refuse an array the kernels cannot read as a C array of ``dtype``."""
    if a.dtype != dtype:
        raise TypeError(f"{what} must be {np.dtype(dtype).name}, got {a.dtype}")
    if not a.flags.c_contiguous:
        raise ValueError(f"{what} must be C-contiguous")


def _matrix(a, dtype, what):
    """Refuse what :func:`_c_array` refuses, and an array that is not 2-d with a column."""
    _c_array(a, dtype, what)
    if a.ndim != 2 or a.shape[1] < 1:
        raise ValueError(f"{what} must be 2-d with at least one column, got shape {a.shape}")


def _check_codec(packed, n, d, int bits):
    """Refuse a bit width or an encoded block that does not fit ``n`` rows of ``d`` values."""
    if bits not in (4, 8):
        raise ValueError(f"the row codec takes 4 or 8 bits, got {bits}")
    if packed.ndim != 2 or packed.shape[0] != n or packed.shape[1] != (d * bits + 7) // 8 + 8:
        raise ValueError(f"encoded rows {tuple(packed.shape)} do not hold {n} rows of {d} values at {bits} bits")


def encode_rows_into(x, dither, out, int bits):
    """Encode float32 rows ``x [n, d]`` into ``out`` (uint8 ``[n, packed width]``) with the
    uniforms ``dither`` (float32, ``n * d``); see csrc/row_codec.hpp."""
    _matrix(x, np.float32, "rows")
    _c_array(dither, np.float32, "dither")
    _c_array(out, np.uint8, "out")
    cdef int64_t n = x.shape[0], d = x.shape[1]
    _check_codec(out, n, d, bits)
    if dither.size < n * d:
        raise ValueError(f"need {n * d} uniforms, got {dither.size}")
    cdef cnp.ndarray xa = x, ua = dither, oa = out
    with nogil:
        encode_rows(<const float*>cnp.PyArray_DATA(xa), n, d, bits, <const float*>cnp.PyArray_DATA(ua),
                    <uint8_t*>cnp.PyArray_DATA(oa), (d * bits + 7) // 8 + 8)
    return out


def decode_rows_into(packed, out, int bits):
    """Decode ``packed`` (uint8 ``[n, packed width]``) into float32 ``out [n, d]``."""
    _c_array(packed, np.uint8, "encoded rows")
    _matrix(out, np.float32, "out")
    cdef int64_t n = out.shape[0], d = out.shape[1]
    _check_codec(packed, n, d, bits)
    cdef int64_t width = packed.shape[1]
    cdef cnp.ndarray pa = packed, oa = out
    with nogil:
        decode_rows(<const uint8_t*>cnp.PyArray_DATA(pa), n, d, bits, width, <float*>cnp.PyArray_DATA(oa))
    return out


def accumulate_rows_into(packed, offsets, target, int bits):
    """``target[offsets[r]] += decoded row r`` in float64 (``target``: ``[rows, d]``;
    ``offsets``: int64, each in range)."""
    _c_array(packed, np.uint8, "encoded rows")
    _c_array(offsets, np.int64, "offsets")
    _matrix(target, np.float64, "target")
    cdef int64_t n = offsets.shape[0], d = target.shape[1]
    _check_codec(packed, n, d, bits)
    if n and (offsets.min() < 0 or offsets.max() >= target.shape[0]):
        raise IndexError(f"offsets must lie in [0, {target.shape[0]})")
    cdef int64_t width = packed.shape[1]
    cdef cnp.ndarray pa = packed, fa = offsets, ta = target
    with nogil:
        accumulate_rows(<const uint8_t*>cnp.PyArray_DATA(pa), n, d, bits, width,
                        <const int64_t*>cnp.PyArray_DATA(fa), <double*>cnp.PyArray_DATA(ta))
    return target


def accumulate_float_rows_into(x, offsets, target):
    """``target[offsets[r]] += x[r]`` in float64 (``x``: float32 ``[n, d]``; ``target``:
    float64 ``[rows, d]``; ``offsets``: int64 ``[n]``, each in range); see
    csrc/row_accumulate.hpp."""
    _matrix(x, np.float32, "rows")
    _c_array(offsets, np.int64, "offsets")
    _matrix(target, np.float64, "target")
    cdef int64_t n = x.shape[0], d = x.shape[1]
    if offsets.ndim != 1 or offsets.shape[0] != n:
        raise ValueError(f"need one offset per row: {n} rows, offsets of shape {offsets.shape}")
    if target.shape[1] != d:
        raise ValueError(f"rows of {d} values cannot be added into a target of {target.shape[1]} columns")
    if n and (offsets.min() < 0 or offsets.max() >= target.shape[0]):
        raise IndexError(f"offsets must lie in [0, {target.shape[0]})")
    cdef cnp.ndarray xa = x, fa = offsets, ta = target
    with nogil:
        accumulate_float_rows(<const float*>cnp.PyArray_DATA(xa), n, d, <const int64_t*>cnp.PyArray_DATA(fa),
                              <double*>cnp.PyArray_DATA(ta))
    return target


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


NARROW_MAX = 16  # the widest narrow side the product kernels take (csrc/narrow_matmul.hpp)


def _narrow(a, what):
    _matrix(a, np.float32, what)
    if a.shape[1] > NARROW_MAX:
        raise ValueError(f"{what} has {a.shape[1]} columns; the narrow products take at most {NARROW_MAX}")


def _narrow_product(x, b, out, bint outer):
    """``out = x @ b`` (``outer``: ``x.T @ b``) with ``b``'s columns, ``m``, at most 16."""
    _matrix(x, np.float32, "x")
    _narrow(b, "g" if outer else "w")
    _narrow(out, "out")
    cdef int64_t n = x.shape[0], k = x.shape[1], m = b.shape[1]
    want_b, want_out = ((n, m), (k, m)) if outer else ((k, m), (n, m))
    if b.shape != want_b or out.shape != want_out:
        x_name = "x.T" if outer else "x"
        raise ValueError(f"shapes do not multiply: {x_name} {x.shape} @ {b.shape} -> out {out.shape}")
    cdef cnp.ndarray xa = x, ba = b, oa = out
    cdef const float* xp = <const float*>cnp.PyArray_DATA(xa)
    cdef const float* bp = <const float*>cnp.PyArray_DATA(ba)
    cdef float* op = <float*>cnp.PyArray_DATA(oa)
    with nogil:
        if outer:
            narrow_outer(xp, n, k, bp, m, op)
        else:
            narrow_matmul(xp, n, k, bp, m, op)
    return out


def narrow_matmul_into(x, w, out):
    """``out [n, m] = x [n, k] @ w [k, m]`` for ``m <= 16`` (float32, C-contiguous)."""
    return _narrow_product(x, w, out, False)


def narrow_outer_into(x, g, out):
    """``out [k, m] = x [n, k].T @ g [n, m]`` for ``m <= 16`` (float32, C-contiguous)."""
    return _narrow_product(x, g, out, True)

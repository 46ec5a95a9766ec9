# cython: boundscheck=False, wraparound=False, cdivision=True
"""Compiled trainer kernels (see csrc/): keyed dropout, the low-bit row codec, the float rows' accumulate,
narrow products, the layers' row epilogue, blends of row blocks, the drift transfer's arithmetic."""
import numpy as np
cimport numpy as cnp
from libc.stdint cimport int64_t, uint64_t, uint32_t, uint8_t

cdef extern from "csrc/keyed_dropout.hpp" namespace "sni":
    void keyed_dropout(const float* x, float* y, int64_t rows, int64_t cols,
                       const int64_t* keys, uint64_t seed, uint32_t threshold, float scale) nogil

cdef extern from "csrc/keyed_dropout.hpp" namespace "sni":
    void keyed_dropout_bits(int64_t rows, int64_t cols, const int64_t* keys, uint64_t seed,
                            uint32_t threshold, uint32_t* bits) nogil

cdef extern from "csrc/keyed_dropout.hpp" namespace "sni":
    cdef struct RowDropout:
        const int64_t* keys
        uint64_t seed
        uint32_t threshold
        float scale

cdef extern from "csrc/narrow_matmul.hpp" namespace "sni":
    void narrow_matmul(const float* x, int64_t n, int64_t k, const float* w, int64_t m, float* out,
                       const float* in_scale, const float* out_scale, RowDropout drop) nogil
    void narrow_outer(const float* x, int64_t n, int64_t k, const float* g, int64_t m, float* out,
                      const float* g_scale, RowDropout drop) nogil

cdef extern from "csrc/row_sum.hpp" namespace "sni":
    void row_sum(const float* x, int64_t d, const int64_t* indptr, const int64_t* indices, int64_t n,
                 float* out, const float* src_scale, const float* dst_scale, const uint32_t* dst_bits,
                 float keep) nogil
    void row_dropped_sum(const float* x, int64_t d, const int64_t* indptr, const int64_t* indices, int64_t n,
                         const uint32_t* bits, float keep, float* dropped, float* plain,
                         const float* src_scale) nogil
    int64_t kPrefetchEdges

cdef extern from "csrc/row_epilogue.hpp" namespace "sni":
    void scale_bias_act(const float* s, const float* t, const float* rs, const float* b, int64_t n,
                        int64_t d, bint relu, float* y) nogil
    void scale_bias_act_backward(const float* g, const float* y, const float* rs, int64_t n, int64_t d,
                                 float* gs, float* part, double* gb) nogil

cdef extern from "csrc/row_blend.hpp" namespace "sni":
    void smooth_rows(const float* old, const float* fresh, int64_t n, float g, float* out) nogil
    void mix_rows(const float* a, float ga, const float* b, float gb, int64_t n, float* out) nogil
    void trend_rows(float* avg, float* twice, const float* fresh, float ga, float gb, int64_t n,
                    float* out) nogil

cdef extern from "csrc/row_accumulate.hpp" namespace "sni":
    void accumulate_float_rows(const float* x, int64_t n, int64_t d, const int64_t* offsets, double* target) nogil

cdef extern from "csrc/row_codec.hpp" namespace "sni":
    void encode_rows(const float* x, int64_t n, int64_t d, int bits, const float* dither,
                     uint8_t* out, int64_t width, const int64_t* rows) nogil
    void decode_rows(const uint8_t* packed, int64_t n, int64_t d, int bits, int64_t width, float* out) nogil
    void accumulate_rows(const uint8_t* packed, int64_t n, int64_t d, int bits, int64_t width,
                         const int64_t* offsets, double* target) nogil

cdef extern from "csrc/row_blocks.hpp" namespace "sni":
    int64_t block_starts(int64_t n, int64_t d, const int64_t* count, int64_t* start) nogil
    bint block_layout(const uint8_t* block, int64_t size, int64_t n, int64_t d, int64_t* start) nogil
    void encode_block(const float* x, int64_t n, int64_t d, const uint8_t* codes, const float* dither,
                      uint8_t* out) nogil
    void decode_block(const uint8_t* block, int64_t n, int64_t d, const int64_t* start, float* out) nogil
    void accumulate_block(const uint8_t* block, int64_t n, int64_t d, const int64_t* start,
                          const int64_t* offsets, double* target) nogil

cdef extern from "csrc/drift_fit.hpp" namespace "sni":
    int drift_fit(const float* owned, int64_t d, int64_t stride, int64_t nf, const double* base,
                  const double* base_chol, double* m_out, double* rows_out, double* chol_out, double ridge) nogil
    void drift_move(const float* cache, int64_t d, const int64_t* sampled, int64_t ns, const double* m,
                    bint nonneg, float* out) nogil
    void drift_score(const float* moved, const float* agent, const float* fresh, int64_t d,
                     const int64_t* sampled, int64_t ns, double decay, double margin, int64_t min_scores,
                     double* err, int64_t* scores, double* layer, bint has_layer) nogil

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


def _pair_shard(a):
    """Refuse a gradient shard that is not C-contiguous float64 ``[rows, 2, d]`` (a sum and its
    rounding error per element, csrc/row_accumulate.hpp); return ``d``."""
    _c_array(a, np.float64, "target")
    if a.ndim != 3 or a.shape[1] != 2 or a.shape[2] < 1:
        raise ValueError(f"target must be a shard of (sum, error) pairs, [rows, 2, d], got shape {a.shape}")
    return a.shape[2]


def _check_codec(packed, n, d, int bits):
    """Refuse a bit width or an encoded block that does not fit ``n`` rows of ``d`` values."""
    if bits not in (2, 4, 8):
        raise ValueError(f"the row codec takes 2, 4 or 8 bits, got {bits}")
    if packed.ndim != 2 or packed.shape[0] != n or packed.shape[1] != (d * bits + 7) // 8 + 8:
        raise ValueError(f"encoded rows {tuple(packed.shape)} do not hold {n} rows of {d} values at {bits} bits")


cdef bint _sorted_below(const int64_t* rows, int64_t count, int64_t n) noexcept nogil:
    """Whether ``rows`` are strictly increasing indices in ``0..n-1``."""
    cdef int64_t k
    for k in range(count):
        if rows[k] < 0 or rows[k] >= n or (k > 0 and rows[k] <= rows[k - 1]):
            return False
    return True


def encode_rows_into(x, dither, out, int bits, rows=None):
    """Encode float32 rows ``x [n, d]`` into ``out`` (uint8 ``[n, packed width]``) with the
    uniforms ``dither`` (float32, ``n * d``); see csrc/row_codec.hpp. ``rows`` (int64, sorted
    distinct indices below ``n``): encode only those rows, into ``out [len(rows), width]``,
    each with the uniforms of its place in ``x``."""
    _matrix(x, np.float32, "rows")
    _c_array(dither, np.float32, "dither")
    _c_array(out, np.uint8, "out")
    cdef int64_t n = x.shape[0], d = x.shape[1], count = n
    cdef const int64_t* chosen = NULL
    cdef cnp.ndarray ra
    if rows is not None:
        _c_array(rows, np.int64, "rows to encode")
        if rows.ndim != 1:
            raise ValueError(f"rows to encode must be 1-d, got shape {rows.shape}")
        ra = rows
        count = rows.shape[0]
        chosen = <const int64_t*>cnp.PyArray_DATA(ra)
        if not _sorted_below(chosen, count, n):
            raise ValueError(f"rows to encode must be sorted distinct indices below {n}")
    _check_codec(out, count, d, bits)
    if dither.size < n * d:
        raise ValueError(f"need {n * d} uniforms, got {dither.size}")
    cdef cnp.ndarray xa = x, ua = dither, oa = out
    with nogil:
        encode_rows(<const float*>cnp.PyArray_DATA(xa), count, d, bits, <const float*>cnp.PyArray_DATA(ua),
                    <uint8_t*>cnp.PyArray_DATA(oa), (d * bits + 7) // 8 + 8, chosen)
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
    """``target[offsets[r]] += decoded row r`` in float64 pairs, error-free (``target``:
    ``[rows, 2, d]``, see csrc/row_accumulate.hpp; ``offsets``: int64, each in range)."""
    _c_array(packed, np.uint8, "encoded rows")
    _c_array(offsets, np.int64, "offsets")
    cdef int64_t n = offsets.shape[0], d = _pair_shard(target)
    _check_codec(packed, n, d, bits)
    if n and (offsets.min() < 0 or offsets.max() >= target.shape[0]):
        raise IndexError(f"offsets must lie in [0, {target.shape[0]})")
    cdef int64_t width = packed.shape[1]
    cdef cnp.ndarray pa = packed, fa = offsets, ta = target
    with nogil:
        accumulate_rows(<const uint8_t*>cnp.PyArray_DATA(pa), n, d, bits, width,
                        <const int64_t*>cnp.PyArray_DATA(fa), <double*>cnp.PyArray_DATA(ta))
    return target


def encode_block_into(x, dither, codes, out):
    """Encode float32 rows ``x [n, d]`` at a width per row (``codes``: uint8, 0: 2 bits, 1: 4,
    2: 8) into the 1-d uint8 block ``out`` with the uniforms ``dither`` (``n * d``); see
    csrc/row_blocks.hpp. ``out`` must have the block's size."""
    _matrix(x, np.float32, "rows")
    _c_array(dither, np.float32, "dither")
    _c_array(codes, np.uint8, "width codes")
    _c_array(out, np.uint8, "out")
    cdef int64_t n = x.shape[0], d = x.shape[1]
    cdef int64_t count[3]
    cdef int64_t start[3]
    if codes.ndim != 1 or codes.shape[0] != n:
        raise ValueError(f"need one width code per row ({n}), got shape {codes.shape}")
    found = np.bincount(codes, minlength=4) if n else np.zeros(4, np.int64)
    if found.shape[0] > 3 and found[3:].any():
        raise ValueError("width codes must be 0 (2 bits), 1 (4 bits) or 2 (8 bits)")
    count[0], count[1], count[2] = found[0], found[1], found[2]
    size = block_starts(n, d, count, start)
    if out.ndim != 1 or out.shape[0] != size:
        raise ValueError(f"a block of these {n} rows of {d} values takes {size} bytes, got shape {out.shape}")
    if dither.size < n * d:
        raise ValueError(f"need {n * d} uniforms, got {dither.size}")
    cdef cnp.ndarray xa = x, ua = dither, ca = codes, oa = out
    with nogil:
        encode_block(<const float*>cnp.PyArray_DATA(xa), n, d, <const uint8_t*>cnp.PyArray_DATA(ca),
                     <const float*>cnp.PyArray_DATA(ua), <uint8_t*>cnp.PyArray_DATA(oa))
    return out


cdef _block_layout(block, int64_t n, int64_t d, int64_t* start):
    _c_array(block, np.uint8, "block")
    if block.ndim != 1:
        raise ValueError(f"a block is 1-d, got shape {block.shape}")
    cdef cnp.ndarray ba = block
    if not block_layout(<const uint8_t*>cnp.PyArray_DATA(ba), block.shape[0], n, d, start):
        raise ValueError(f"a block of {block.shape[0]} bytes does not hold {n} rows of {d} values at the widths "
                         "it names (2, 4 or 8 bits)")


def decode_block_into(block, out):
    """Decode an :func:`encode_block_into` block into float32 ``out [n, d]``."""
    _matrix(out, np.float32, "out")
    cdef int64_t n = out.shape[0], d = out.shape[1]
    cdef int64_t start[3]
    _block_layout(block, n, d, start)
    cdef cnp.ndarray ba = block, oa = out
    with nogil:
        decode_block(<const uint8_t*>cnp.PyArray_DATA(ba), n, d, start, <float*>cnp.PyArray_DATA(oa))
    return out


def accumulate_block_into(block, offsets, target):
    """``target[offsets[r]] += decoded row r`` of a block, in float64 pairs, error-free
    (``target``: ``[rows, 2, d]``; ``offsets``: int64, one per row of the block, each in range)."""
    _c_array(offsets, np.int64, "offsets")
    cdef int64_t n = offsets.shape[0], d = _pair_shard(target)
    cdef int64_t start[3]
    _block_layout(block, n, d, start)
    if n and (offsets.min() < 0 or offsets.max() >= target.shape[0]):
        raise IndexError(f"offsets must lie in [0, {target.shape[0]})")
    cdef cnp.ndarray ba = block, fa = offsets, ta = target
    with nogil:
        accumulate_block(<const uint8_t*>cnp.PyArray_DATA(ba), n, d, start, <const int64_t*>cnp.PyArray_DATA(fa),
                         <double*>cnp.PyArray_DATA(ta))
    return target


def _same_block(a, b, out, what):
    """Refuse float32 blocks the blends cannot read element by element as one."""
    for arr, name in ((a, what[0]), (b, what[1]), (out, "out")):
        _c_array(arr, np.float32, name)
    if a.shape != b.shape or out.shape != a.shape:
        raise ValueError(f"{what[0]} {a.shape}, {what[1]} {b.shape} and out {out.shape} must have one shape")


def smooth_rows_into(old, fresh, float g, out):
    """``out = (old - fresh) * g + fresh`` in float32, one pass (``out`` may be ``old`` or
    ``fresh``); see csrc/row_blend.hpp."""
    _same_block(old, fresh, out, ("old rows", "fresh rows"))
    cdef cnp.ndarray oa = old, fa = fresh, ra = out
    cdef int64_t n = old.size
    with nogil:
        smooth_rows(<const float*>cnp.PyArray_DATA(oa), <const float*>cnp.PyArray_DATA(fa), n, g,
                    <float*>cnp.PyArray_DATA(ra))
    return out


def mix_rows_into(a, float ga, b, float gb, out):
    """``out = a * ga + b * gb`` in float32, one pass (``out`` may be ``a`` or ``b``)."""
    _same_block(a, b, out, ("a", "b"))
    cdef cnp.ndarray aa = a, ba = b, ra = out
    cdef int64_t n = a.size
    with nogil:
        mix_rows(<const float*>cnp.PyArray_DATA(aa), ga, <const float*>cnp.PyArray_DATA(ba), gb, n,
                 <float*>cnp.PyArray_DATA(ra))
    return out


def trend_rows_into(avg, twice, fresh, float ga, float gb, out):
    """``avg = avg * ga + fresh * gb``, ``twice = twice * ga + avg * gb`` in place and ``out =
    2 avg - twice``, in float32, one pass; see csrc/row_blend.hpp."""
    _same_block(avg, fresh, out, ("avg", "fresh"))
    _same_block(twice, fresh, out, ("twice", "fresh"))
    cdef cnp.ndarray aa = avg, ta = twice, fa = fresh, ra = out
    cdef int64_t n = avg.size
    with nogil:
        trend_rows(<float*>cnp.PyArray_DATA(aa), <float*>cnp.PyArray_DATA(ta), <const float*>cnp.PyArray_DATA(fa),
                   ga, gb, n, <float*>cnp.PyArray_DATA(ra))
    return out


def accumulate_float_rows_into(x, offsets, target):
    """``target[offsets[r]] += x[r]`` in float64 pairs, error-free (``x``: float32 ``[n, d]``;
    ``target``: float64 ``[rows, 2, d]``; ``offsets``: int64 ``[n]``, each in range); see
    csrc/row_accumulate.hpp."""
    _matrix(x, np.float32, "rows")
    _c_array(offsets, np.int64, "offsets")
    cdef int64_t n = x.shape[0], d = x.shape[1]
    if offsets.ndim != 1 or offsets.shape[0] != n:
        raise ValueError(f"need one offset per row: {n} rows, offsets of shape {offsets.shape}")
    if _pair_shard(target) != d:
        raise ValueError(f"rows of {d} values cannot be added into a target of {target.shape[2]} columns")
    if n and (offsets.min() < 0 or offsets.max() >= target.shape[0]):
        raise IndexError(f"offsets must lie in [0, {target.shape[0]})")
    cdef cnp.ndarray xa = x, fa = offsets, ta = target
    with nogil:
        accumulate_float_rows(<const float*>cnp.PyArray_DATA(xa), n, d, <const int64_t*>cnp.PyArray_DATA(fa),
                              <double*>cnp.PyArray_DATA(ta))
    return target


cdef uint32_t _drop_threshold(double p):
    return <uint32_t>min(p * 4294967296.0, 4294967295.0)


cdef RowDropout _row_dropout(keys, uint64_t seed, double p, int64_t n) except *:
    """The dropout a narrow product applies to its rows (``keys`` ``None``: none)."""
    cdef RowDropout drop
    cdef cnp.ndarray ka
    drop.keys, drop.seed, drop.threshold, drop.scale = <const int64_t*>NULL, 0, 0, 1.0
    if keys is None:
        return drop
    _c_array(keys, np.int64, "dropout keys")
    if keys.ndim != 1 or keys.shape[0] != n:
        raise ValueError(f"need one dropout key per row: {n} rows, keys of shape {keys.shape}")
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability must lie in [0, 1), got {p}")
    ka = keys
    drop.keys = <const int64_t*>cnp.PyArray_DATA(ka)
    drop.seed, drop.threshold, drop.scale = seed, _drop_threshold(p), <float>(1.0 / (1.0 - p))
    return drop


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
    cdef uint32_t threshold = _drop_threshold(p)
    cdef float scale = <float>(1.0 / (1.0 - p))
    with nogil:
        keyed_dropout(<const float*>cnp.PyArray_DATA(xa), <float*>cnp.PyArray_DATA(oa), rows, cols,
                      <const int64_t*>cnp.PyArray_DATA(ka), seed, threshold, scale)
    return out


BITS_MAX = 32  # the most columns keyed_dropout_bits_into gives a row's keep bits for (one word)


def keyed_dropout_bits_into(keys, uint64_t seed, double p, int64_t cols, bits):
    """``bits[row]``: bit ``c`` set where :func:`keyed_dropout_into` keeps element ``(row, c)``
    of rows keyed ``keys`` (int64 ``[rows]``), for ``cols`` (at most :data:`BITS_MAX`)
    columns; ``bits``: uint32 ``[rows]``."""
    _c_array(keys, np.int64, "dropout keys")
    _c_array(bits, np.uint32, "keep bits")
    if keys.ndim != 1 or bits.ndim != 1 or bits.shape[0] != keys.shape[0]:
        raise ValueError(f"need one word of keep bits per key: {keys.shape} keys, {bits.shape} words")
    if not 0 <= cols <= BITS_MAX:
        raise ValueError(f"keep bits cover at most {BITS_MAX} columns, got {cols}")
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout probability must lie in [0, 1), got {p}")
    cdef cnp.ndarray ka = keys, ba = bits
    cdef int64_t rows = keys.shape[0]
    cdef uint32_t threshold = _drop_threshold(p)
    with nogil:
        keyed_dropout_bits(rows, cols, <const int64_t*>cnp.PyArray_DATA(ka), seed, threshold,
                           <uint32_t*>cnp.PyArray_DATA(ba))
    return bits


NARROW_MAX = 16  # the widest narrow side the product kernels take (csrc/narrow_matmul.hpp)


def _narrow(a, what):
    _matrix(a, np.float32, what)
    if a.shape[1] > NARROW_MAX:
        raise ValueError(f"{what} has {a.shape[1]} columns; the narrow products take at most {NARROW_MAX}")


cdef void* _optional_data(a, dtype, int64_t size, what) except? NULL:
    """The data of an optional C array of ``size`` values of ``dtype``, or NULL for ``None``."""
    if a is None:
        return NULL
    _c_array(a, dtype, what)
    if a.size != size:
        raise ValueError(f"{what} needs {size} values, got {a.size}")
    cdef cnp.ndarray arr = a
    return cnp.PyArray_DATA(arr)


cdef const float* _row_scale(scale, int64_t n, what) except? NULL:
    """The data of a per-row scale (float32, C-contiguous, one value per row), or NULL for ``None``."""
    return <const float*>_optional_data(scale, np.float32, n, f"{what} (one value per row)")


def _narrow_product(x, b, out, bint outer, in_scale=None, out_scale=None, drop=None):
    """``out = x @ b`` (``outer``: ``x.T @ b``) with ``b``'s columns, ``m``, at most 16;
    ``in_scale`` scales the rows of ``x`` (``outer``: of ``b``), ``out_scale`` the output rows;
    ``drop`` (``(keys, seed, p)``) drops the rows of ``x`` as :func:`keyed_dropout_into` would."""
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
    cdef const float* isp = _row_scale(in_scale, n, "in_scale")
    cdef const float* osp = _row_scale(out_scale, n, "out_scale")
    cdef RowDropout rd = _row_dropout(None, 0, 0.0, n) if drop is None else _row_dropout(drop[0], drop[1], drop[2], n)
    if rd.keys != NULL and isp != NULL and not outer:
        raise ValueError("a narrow product drops or scales its rows, not both")
    with nogil:
        if outer:
            narrow_outer(xp, n, k, bp, m, op, isp, rd)
        else:
            narrow_matmul(xp, n, k, bp, m, op, isp, osp, rd)
    return out


def narrow_matmul_into(x, w, out, in_scale=None, out_scale=None, drop=None):
    """``out [n, m] = x [n, k] @ w [k, m]`` for ``m <= 16`` (float32, C-contiguous); with
    ``in_scale`` (``[n]``) the rows of ``x`` are scaled first, with ``out_scale`` the output's;
    with ``drop`` (``(keys, seed, p)``) the rows of ``x`` are keyed-dropped first."""
    return _narrow_product(x, w, out, False, in_scale, out_scale, drop)


def narrow_outer_into(x, g, out, g_scale=None, drop=None):
    """``out [k, m] = x [n, k].T @ g [n, m]`` for ``m <= 16`` (float32, C-contiguous); with
    ``g_scale`` (``[n]``) the rows of ``g`` are scaled first, with ``drop`` those of ``x``
    keyed-dropped."""
    return _narrow_product(x, g, out, True, g_scale, None, drop)


def _check_epilogue(rows, out, other, other_what, rs):
    """Refuse epilogue operands that do not fit ``rows`` (float32 ``[n, d]``); the row scale's data."""
    _matrix(rows, np.float32, "rows")
    _matrix(out, np.float32, "out")
    if out.shape != rows.shape or (other is not None and other.shape != rows.shape):
        raise ValueError(f"shape mismatch: rows {rows.shape}, {other_what} "
                         f"{None if other is None else other.shape}, out {out.shape}")
    if rs is None:
        raise ValueError("the row epilogue needs a row scale")


def scale_bias_act_into(s, t, rs, b, bint relu, out):
    """``out = act((s + t) * rs[:, None] + b)`` (``t``, ``b``: ``None`` to leave out; act: relu
    or the identity); float32, C-contiguous; see csrc/row_epilogue.hpp."""
    _check_epilogue(s, out, t, "added rows", rs)
    cdef int64_t n = s.shape[0], d = s.shape[1]
    cdef const float* tp = <const float*>_optional_data(t, np.float32, n * d, "added rows")
    cdef const float* bp = <const float*>_optional_data(b, np.float32, d, "bias (one value per column)")
    cdef const float* rsp = _row_scale(rs, n, "row scale")
    cdef cnp.ndarray sa = s, oa = out
    with nogil:
        scale_bias_act(<const float*>cnp.PyArray_DATA(sa), tp, rsp, bp, n, d, relu,
                       <float*>cnp.PyArray_DATA(oa))
    return out


def scale_bias_act_backward_into(g, y, rs, gs, gb):
    """The row epilogue's backward: ``z = g * (y > 0)`` (``y``: ``None`` without the relu),
    ``gs = z * rs[:, None]``, ``gb += z.sum(0)`` in float64 (``gb``: ``None`` without a bias)."""
    _check_epilogue(g, gs, y, "rows", rs)
    cdef int64_t n = g.shape[0], d = g.shape[1]
    cdef const float* yp = <const float*>_optional_data(y, np.float32, n * d, "rows")
    cdef double* bp = <double*>_optional_data(gb, np.float64, d, "bias gradient (one value per column)")
    cdef const float* rsp = _row_scale(rs, n, "row scale")
    part = np.empty(d, np.float32)
    cdef cnp.ndarray ga = g, sa = gs, pa = part
    with nogil:
        scale_bias_act_backward(<const float*>cnp.PyArray_DATA(ga), yp, rsp, n, d,
                                <float*>cnp.PyArray_DATA(sa), <float*>cnp.PyArray_DATA(pa), bp)
    return gs



PREFETCH_PAD = kPrefetchEdges  # row_sum_into's indices carry this many readable entries past the last edge


def _check_sum(x, indptr, indices, out, what="out"):
    """Refuse a row sum's arrays that do not fit (see :func:`row_sum_into`)."""
    _matrix(x, np.float32, "rows")
    _matrix(out, np.float32, what)
    _c_array(indptr, np.int64, "indptr")
    _c_array(indices, np.int64, "indices")
    cdef int64_t n = out.shape[0], d = x.shape[1]
    if out.shape[1] != d:
        raise ValueError(f"sums of rows of {d} values into rows of {out.shape[1]}")
    if indptr.ndim != 1 or indptr.shape[0] != n + 1:
        raise ValueError(f"indptr needs {n + 1} entries for {n} rows, got {indptr.shape}")
    if indptr[0] != 0 or indices.shape[0] < indptr[n] + PREFETCH_PAD:
        raise ValueError(f"indices must hold the {indptr[n]} edges and {PREFETCH_PAD} entries of padding")


def _check_dropped_width(int64_t d):
    if d != 8 and d != 16:
        raise ValueError(f"dropped row sums take rows of 8 or 16 values, got {d}")


def row_sum_into(x, indptr, indices, out, src_scale=None, dst_scale=None, dst_bits=None, float keep=1.0):
    """``out[v] = dst_scale[v] * sum of src_scale[u] * x[u]``, ``u = indices[e]``, over ``e`` in
    ``indptr[v] .. indptr[v + 1]`` (float32 rows, int64 ``indptr [n + 1]`` and ``indices``,
    which hold :data:`PREFETCH_PAD` valid row ids past ``indptr[n]``; the scales optional,
    float32, one value per row); with ``dst_bits`` (uint32 keep bits per output row, from
    :func:`keyed_dropout_bits_into`; rows of 8 or 16 values) each sum is then dropped as
    :func:`keyed_dropout_into` with ``keep = 1 / (1 - p)`` would; see csrc/row_sum.hpp."""
    _check_sum(x, indptr, indices, out)
    cdef int64_t n = out.shape[0], d = x.shape[1]
    if dst_bits is not None:
        _check_dropped_width(d)
    cdef const float* ssp = _row_scale(src_scale, x.shape[0], "source scale")
    cdef const float* dsp = _row_scale(dst_scale, n, "sum scale")
    cdef const uint32_t* dbp = <const uint32_t*>_optional_data(dst_bits, np.uint32, n, "keep bits of the sums")
    cdef cnp.ndarray xa = x, pa = indptr, ia = indices, oa = out
    with nogil:
        row_sum(<const float*>cnp.PyArray_DATA(xa), d, <const int64_t*>cnp.PyArray_DATA(pa),
                <const int64_t*>cnp.PyArray_DATA(ia), n, <float*>cnp.PyArray_DATA(oa), ssp, dsp, dbp, keep)
    return out


def row_dropped_sum_into(x, indptr, indices, bits, float keep, dropped, plain=None, src_scale=None):
    """:func:`row_sum_into` of the rows ``x`` dropped by their keep bits ``bits`` (uint32, one
    per row of ``x``; kept values times ``keep``) into ``dropped`` and, with ``plain``, of the
    rows as they are into ``plain``, in one pass (rows of 8 or 16 values)."""
    _check_sum(x, indptr, indices, dropped, "dropped")
    cdef int64_t n = dropped.shape[0], d = x.shape[1]
    _check_dropped_width(d)
    if plain is not None:
        _check_sum(x, indptr, indices, plain, "plain")
    cdef const uint32_t* bp = <const uint32_t*>_optional_data(bits, np.uint32, x.shape[0], "keep bits of the rows")
    if bp == NULL:
        raise ValueError("a dropped row sum needs the rows' keep bits")
    cdef float* pp = <float*>_optional_data(plain, np.float32, n * d, "plain")
    cdef const float* ssp = _row_scale(src_scale, x.shape[0], "source scale")
    cdef cnp.ndarray xa = x, pa = indptr, ia = indices, da = dropped
    with nogil:
        row_dropped_sum(<const float*>cnp.PyArray_DATA(xa), d, <const int64_t*>cnp.PyArray_DATA(pa),
                        <const int64_t*>cnp.PyArray_DATA(ia), n, bp, keep, <float*>cnp.PyArray_DATA(da), pp, ssp)
    return dropped


# ---------------------------------------------------------------- the drift transfer (csrc/drift_fit.hpp)
def drift_fit_rows(owned, int64_t stride, base=None, base_chol=None, bint rebase=False, double ridge=0.0):
    """The drift transfer's fit over the owned rows ``owned`` (float32 ``[n, d]``, every
    ``stride``-th row): ``(m, rows, chol, nonneg)``. ``m`` (``[d + 1, d]``, float64; ``None``
    without ``base``): the least-squares map from the fit rows ``base`` (``[nf, d + 1]``, whose
    Gram matrix's Cholesky factor is ``base_chol``) to these; with ``rebase``: ``rows`` (these
    fit rows, float64 with a trailing 1) and ``chol`` (their Gram matrix's factor, with
    ``ridge`` times the mean of its diagonal added to it); ``nonneg``: every fit value is >= 0."""
    _matrix(owned, np.float32, "owned rows")
    if stride < 1:
        raise ValueError(f"stride must be at least 1, got {stride}")
    cdef int64_t n = owned.shape[0], d = owned.shape[1], w = owned.shape[1] + 1
    cdef int64_t nf = (n + stride - 1) // stride
    cdef cnp.ndarray oa = owned, ba, ca, ma, ra, cha
    cdef const double* bp = NULL
    cdef const double* cp = NULL
    cdef double* mp = NULL
    cdef double* rp = NULL
    cdef double* chp = NULL
    m = rows = chol = None
    if base is not None:
        _c_array(base, np.float64, "base")
        _c_array(base_chol, np.float64, "base factor")
        if base.shape != (nf, w):
            raise ValueError(f"owned rows changed from {base.shape[0]} to {nf} fit rows since the last sync"
                             if base.ndim == 2 and base.shape[1] == w else
                             f"base has shape {base.shape}, the fit rows need ({nf}, {w})")
        if base_chol.shape != (w, w):
            raise ValueError(f"base factor has shape {base_chol.shape}, want ({w}, {w})")
        ba, ca = base, base_chol
        bp, cp = <const double*>cnp.PyArray_DATA(ba), <const double*>cnp.PyArray_DATA(ca)
        m = np.empty((w, d), np.float64)
        ma = m
        mp = <double*>cnp.PyArray_DATA(ma)
    if rebase:
        rows, chol = np.empty((nf, w), np.float64), np.empty((w, w), np.float64)
        ra, cha = rows, chol
        rp, chp = <double*>cnp.PyArray_DATA(ra), <double*>cnp.PyArray_DATA(cha)
    cdef const float* op = <const float*>cnp.PyArray_DATA(oa)
    cdef int status
    with nogil:
        status = drift_fit(op, d, stride, nf, bp, cp, mp, rp, chp, ridge)
    if status < 0:
        raise ValueError("the owned rows' Gram matrix is not positive definite (are there NaN or infinite "
                         "values in them?)")
    return m, rows, chol, status == 1


def _sampled_rows(sampled, int64_t num_rows):
    _c_array(sampled, np.int64, "sampled rows")
    if sampled.ndim != 1:
        raise ValueError(f"sampled rows must be 1-d, got shape {sampled.shape}")
    if sampled.size and (sampled.min() < 0 or sampled.max() >= num_rows):
        raise ValueError(f"sampled rows must lie in [0, {num_rows})")


def drift_move_rows(cache, sampled, m, bint nonneg):
    """``cache[sampled] @ m[:-1] + m[-1]`` in float64 (clamped at 0 with ``nonneg``), as
    float32 ``[len(sampled), d]``: the sampled halo rows moved by the map ``m``."""
    _matrix(cache, np.float32, "cache rows")
    cdef int64_t d = cache.shape[1], ns = sampled.shape[0]
    _sampled_rows(sampled, cache.shape[0])
    _c_array(m, np.float64, "map")
    if m.shape != (d + 1, d):
        raise ValueError(f"map has shape {m.shape}, want ({d + 1}, {d})")
    out = np.empty((ns, d), np.float32)
    cdef cnp.ndarray ca = cache, sa = sampled, ma = m, oa = out
    cdef const float* cp = <const float*>cnp.PyArray_DATA(ca)
    cdef const int64_t* sp = <const int64_t*>cnp.PyArray_DATA(sa)
    cdef const double* mp = <const double*>cnp.PyArray_DATA(ma)
    cdef float* op = <float*>cnp.PyArray_DATA(oa)
    with nogil:
        drift_move(cp, d, sp, ns, mp, nonneg, op)
    return out


def drift_score_rows(moved, agent, fresh, sampled, double decay, double margin, int64_t min_scores, err, scores,
                layer, bint has_layer):
    """One sync's scores of the drift transfer, in place: ``err`` (``[2, ns]`` float64, the
    decayed errors of the transferred and of the agent's rows), ``scores`` (``[ns]`` int64)
    and ``layer`` (``[2]``, the decayed sums served-as-chosen and agent's; seeded unless
    ``has_layer``). ``moved``: ``[ns, d]``; ``agent`` and ``fresh``: rows indexed by ``sampled``."""
    _matrix(agent, np.float32, "agent rows")
    _matrix(fresh, np.float32, "fresh rows")
    _matrix(moved, np.float32, "moved rows")
    cdef int64_t d = fresh.shape[1], ns = sampled.shape[0]
    if agent.shape != fresh.shape or moved.shape != (ns, d):
        raise ValueError(f"rows do not match: agent {agent.shape}, fresh {fresh.shape}, moved {moved.shape} "
                         f"for {ns} sampled rows")
    _sampled_rows(sampled, fresh.shape[0])
    _c_array(err, np.float64, "errors")
    _c_array(scores, np.int64, "scores")
    _c_array(layer, np.float64, "layer errors")
    if err.shape != (2, ns) or scores.shape != (ns,) or layer.shape != (2,):
        raise ValueError(f"state shapes {err.shape}, {scores.shape}, {layer.shape} do not fit {ns} sampled rows")
    cdef cnp.ndarray mva = moved, aa = agent, fa = fresh, sa = sampled, ea = err, sca = scores, la = layer
    cdef const float* mvp = <const float*>cnp.PyArray_DATA(mva)
    cdef const float* ap = <const float*>cnp.PyArray_DATA(aa)
    cdef const float* fp = <const float*>cnp.PyArray_DATA(fa)
    cdef const int64_t* sp = <const int64_t*>cnp.PyArray_DATA(sa)
    cdef double* ep = <double*>cnp.PyArray_DATA(ea)
    cdef int64_t* scp = <int64_t*>cnp.PyArray_DATA(sca)
    cdef double* lp = <double*>cnp.PyArray_DATA(la)
    with nogil:
        drift_score(mvp, ap, fp, d, sp, ns, decay, margin, min_scores, ep, scp, lp, has_layer)

// Low-bit row codec of dgl_sni.halo.quantize, one pass per row.
//
// A row x[0..d) becomes codes c_j = min(floor((x_j - lo) / s + u_j), L) with lo = min x,
// s = (max x - lo) / L (1 where that is 0), L = 2^bits - 1 and u_j the caller's uniforms in
// [0, 1); then the float32 pair (lo, s). Narrower codes go 8 / bits per byte, the first
// column in the lowest bits (4 bits: the even column in the low nibble). A code decodes to
// lo + c * s. Every float operation is the one torch's
// reference does, in the same order (the build turns off FMA contraction), so the bytes and
// the decoded values are equal to the bit.
//
// Rows of 8 or 16 values (the hidden widths) are encoded four values at a time with SSE2:
// the same operation on every value, so the same bits. Only min and max change order (over
// lanes, then across them). That can change which zero (+0 or -0) a row keeps, so a zero
// min or max is taken as the scan would, the row's first zero (gradient rows often have
// zero columns or are zero); and which NaN, so a row that holds a NaN takes the scan.
#pragma once
#include <cstdint>
#include <cstring>

#include "row_accumulate.hpp"
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace sni {

inline uint8_t row_code(float x, float lo, float safe, float u, int32_t levels) {
    float v = (x - lo) / safe;
    v += u;
    const int32_t c = static_cast<int32_t>(v);  // v >= 0: truncation is floor
    return static_cast<uint8_t>(c > levels ? levels : c);
}

// One row, left to right (any width).
inline void encode_row_scan(const float* xr, int64_t d, int bits, const float* ur, uint8_t* o, int64_t header) {
    const int32_t levels = (1 << bits) - 1;
    float lo = xr[0], hi = xr[0];
    for (int64_t j = 1; j < d; ++j) {
        lo = xr[j] < lo ? xr[j] : lo;
        hi = xr[j] > hi ? xr[j] : hi;
    }
    const float scale = (hi - lo) / static_cast<float>(levels);
    const float safe = scale > 0.0f ? scale : 1.0f;
    if (bits == 8) {
        for (int64_t j = 0; j < d; ++j) o[j] = row_code(xr[j], lo, safe, ur[j], levels);
    } else {
        const int64_t per = 8 / bits;
        for (int64_t j0 = 0; j0 < d; j0 += per) {
            uint32_t byte = 0;
            for (int64_t k = 0; k < per && j0 + k < d; ++k)
                byte |= static_cast<uint32_t>(row_code(xr[j0 + k], lo, safe, ur[j0 + k], levels)) << (bits * k);
            o[j0 / per] = static_cast<uint8_t>(byte);
        }
    }
    std::memcpy(o + header, &lo, 4);
    std::memcpy(o + header + 4, &scale, 4);
}

#if defined(__SSE2__)
// The first zero of a row that has one (+0 or -0, as it is stored).
inline float first_zero(const float* xr, int d) {
    for (int j = 0; j < d; ++j)
        if (xr[j] == 0.0f) return xr[j];
    return 0.0f;
}

// One row of D = 8 or 16 values in D / 4 lanes of four, at 8 or 4 bits; false (nothing
// written): the row needs the scan. Codes saturate to 0..255 as they are packed to bytes (packs, packus),
// which for non-negative codes is the clamp to 255; 4-bit codes are then clamped to 15.
template <int D>
inline bool encode_row_lanes(const float* xr, int bits, const float* ur, uint8_t* o, int64_t header) {
    static_assert(D == 8 || D == 16, "lanes of four, packed as 8 or 16 bytes");
    constexpr int K = D / 4;
    if (bits != 8 && bits != 4) return false;
    __m128 v[K];
    for (int k = 0; k < K; ++k) v[k] = _mm_loadu_ps(xr + 4 * k);
    __m128 lo = v[0], hi = v[0], nan = _mm_cmpunord_ps(v[0], v[0]);
    for (int k = 1; k < K; ++k) {
        lo = _mm_min_ps(lo, v[k]);
        hi = _mm_max_ps(hi, v[k]);
        nan = _mm_or_ps(nan, _mm_cmpunord_ps(v[k], v[k]));
    }
    if (_mm_movemask_ps(nan)) return false;
    lo = _mm_min_ps(lo, _mm_shuffle_ps(lo, lo, _MM_SHUFFLE(1, 0, 3, 2)));
    lo = _mm_min_ps(lo, _mm_shuffle_ps(lo, lo, _MM_SHUFFLE(2, 3, 0, 1)));
    hi = _mm_max_ps(hi, _mm_shuffle_ps(hi, hi, _MM_SHUFFLE(1, 0, 3, 2)));
    hi = _mm_max_ps(hi, _mm_shuffle_ps(hi, hi, _MM_SHUFFLE(2, 3, 0, 1)));
    float l = _mm_cvtss_f32(lo), h = _mm_cvtss_f32(hi);
    if (l == 0.0f) l = first_zero(xr, D);  // the scan keeps the first of +0 and -0
    if (h == 0.0f) h = first_zero(xr, D);
    const int32_t levels = (1 << bits) - 1;
    const float scale = (h - l) / static_cast<float>(levels);
    const float safe = scale > 0.0f ? scale : 1.0f;
    const __m128 vl = _mm_set1_ps(l), vs = _mm_set1_ps(safe);
    __m128i c[K];
    for (int k = 0; k < K; ++k) {
        __m128 q = _mm_div_ps(_mm_sub_ps(v[k], vl), vs);
        q = _mm_add_ps(q, _mm_loadu_ps(ur + 4 * k));
        c[k] = _mm_cvttps_epi32(q);
    }
    const __m128i w0 = _mm_packs_epi32(c[0], c[1]);
    const __m128i w1 = K == 4 ? _mm_packs_epi32(c[K - 2], c[K - 1]) : w0;
    __m128i bytes = _mm_packus_epi16(w0, w1);  // D codes (D = 8: twice)
    if (bits == 8) {
        if (D == 16) _mm_storeu_si128(reinterpret_cast<__m128i*>(o), bytes);
        else _mm_storel_epi64(reinterpret_cast<__m128i*>(o), bytes);
    } else {
        bytes = _mm_min_epu8(bytes, _mm_set1_epi8(static_cast<char>(levels)));
        const __m128i even = _mm_and_si128(bytes, _mm_set1_epi16(0x00FF));
        const __m128i odd = _mm_srli_epi16(bytes, 8);
        const __m128i nib = _mm_packus_epi16(_mm_or_si128(even, _mm_slli_epi16(odd, 4)), _mm_setzero_si128());
        if (D == 16) {
            _mm_storel_epi64(reinterpret_cast<__m128i*>(o), nib);
        } else {
            const int32_t four = _mm_cvtsi128_si32(nib);
            std::memcpy(o, &four, 4);
        }
    }
    std::memcpy(o + header, &l, 4);
    std::memcpy(o + header + 4, &scale, 4);
    return true;
}
#endif

// One row at `bits` into o (codes, then lo and s at o + header).
inline void encode_row(const float* xr, int64_t d, int bits, const float* ur, uint8_t* o, int64_t header) {
#if defined(__SSE2__)
    if (d == 16 && encode_row_lanes<16>(xr, bits, ur, o, header)) return;
    if (d == 8 && encode_row_lanes<8>(xr, bits, ur, o, header)) return;
#endif
    encode_row_scan(xr, d, bits, ur, o, header);
}

// out: rows of `width` bytes, codes first, then lo and s; dither: uniforms, row-major, d per
// row of x. rows (n sorted indices into x; nullptr: 0..n-1): out row k is x's row rows[k],
// encoded with that row's uniforms, so its bytes are those an encode of every row gives it.
inline void encode_rows(const float* x, int64_t n, int64_t d, int bits, const float* dither,
                        uint8_t* out, int64_t width, const int64_t* rows = nullptr) {
    const int64_t header = width - 8;
    for (int64_t k = 0; k < n; ++k) {
        const int64_t r = rows ? rows[k] : k;
        const float* xr = x + r * d;
        const float* ur = dither + r * d;
        encode_row(xr, d, bits, ur, out + k * width, header);
    }
}

inline void header_of(const uint8_t* o, int64_t width, float* lo, float* scale) {
    std::memcpy(lo, o + width - 8, 4);
    std::memcpy(scale, o + width - 4, 4);
}

// One row of `width` bytes at BITS: y[j] = lo + c_j * s (float32), or with ADD the same in
// float64 added into the pair row at y (the owner's gradient shard: sums y[0..d), errors
// y[d..2d), see row_accumulate.hpp).
template <int BITS, bool ADD, typename T>
inline void decode_row_as(const uint8_t* o, int64_t d, int64_t width, T* y) {
    constexpr int per = 8 / BITS;
    constexpr int mask = (1 << BITS) - 1;
    float lo32, scale32;
    header_of(o, width, &lo32, &scale32);
    const T lo = lo32, scale = scale32;
    for (int64_t j = 0; j < d; ++j) {
        const uint8_t c = BITS == 8 ? o[j] : static_cast<uint8_t>((o[j / per] >> (BITS * (j % per))) & mask);
        const T v = lo + static_cast<T>(c) * scale;
        if constexpr (ADD) two_sum_into(y[j], y[d + j], v); else y[j] = v;
    }
}

inline void decode_row(const uint8_t* o, int64_t d, int bits, int64_t width, float* y) {
    if (bits == 8) decode_row_as<8, false>(o, d, width, y);
    else if (bits == 4) decode_row_as<4, false>(o, d, width, y);
    else decode_row_as<2, false>(o, d, width, y);
}

inline void accumulate_row(const uint8_t* o, int64_t d, int bits, int64_t width, double* t) {
    if (bits == 8) decode_row_as<8, true>(o, d, width, t);
    else if (bits == 4) decode_row_as<4, true>(o, d, width, t);
    else decode_row_as<2, true>(o, d, width, t);
}

// out[r, j] = lo + c * s, float32.
inline void decode_rows(const uint8_t* packed, int64_t n, int64_t d, int bits, int64_t width, float* out) {
    for (int64_t r = 0; r < n; ++r) decode_row(packed + r * width, d, bits, width, out + r * d);
}

// target[offsets[r], :, j] += lo + c * s, in float64 pairs (the owner's gradient shard, [rows, 2, d]).
inline void accumulate_rows(const uint8_t* packed, int64_t n, int64_t d, int bits, int64_t width,
                            const int64_t* offsets, double* target) {
    for (int64_t r = 0; r < n; ++r) accumulate_row(packed + r * width, d, bits, width, target + offsets[r] * 2 * d);
}

}  // namespace sni

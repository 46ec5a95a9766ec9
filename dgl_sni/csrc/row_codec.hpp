// Low-bit row codec of dgl_sni.halo.quantize, one pass per row.
//
// A row x[0..d) becomes codes c_j = min(floor((x_j - lo) / s + u_j), L) with lo = min x,
// s = (max x - lo) / L (1 where that is 0), L = 2^bits - 1 and u_j the caller's uniforms in
// [0, 1); then the float32 pair (lo, s). 4-bit codes go two per byte, the even column in the
// low nibble. A code decodes to lo + c * s. Every float operation is the one torch's
// reference does, in the same order (the build turns off FMA contraction), so the bytes and
// the decoded values are equal to the bit.
#pragma once
#include <cstdint>
#include <cstring>

namespace sni {

inline uint8_t row_code(float x, float lo, float safe, float u, int32_t levels) {
    float v = (x - lo) / safe;
    v += u;
    const int32_t c = static_cast<int32_t>(v);  // v >= 0: truncation is floor
    return static_cast<uint8_t>(c > levels ? levels : c);
}

// out: rows of `width` bytes, codes first, then lo and s; dither: n * d uniforms, row-major.
inline void encode_rows(const float* x, int64_t n, int64_t d, int bits, const float* dither,
                        uint8_t* out, int64_t width) {
    const int32_t levels = (1 << bits) - 1;
    const int64_t header = width - 8;
    for (int64_t r = 0; r < n; ++r) {
        const float* xr = x + r * d;
        const float* ur = dither + r * d;
        uint8_t* o = out + r * width;
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
            for (int64_t j = 0; j + 1 < d; j += 2)
                o[j / 2] = static_cast<uint8_t>(row_code(xr[j], lo, safe, ur[j], levels) |
                                                (row_code(xr[j + 1], lo, safe, ur[j + 1], levels) << 4));
            if (d % 2) o[d / 2] = row_code(xr[d - 1], lo, safe, ur[d - 1], levels);
        }
        std::memcpy(o + header, &lo, 4);
        std::memcpy(o + header + 4, &scale, 4);
    }
}

template <typename T>
inline T decoded(const uint8_t* o, int64_t j, int bits, T lo, T scale) {
    const uint8_t c = bits == 8 ? o[j] : static_cast<uint8_t>((o[j / 2] >> (4 * (j % 2))) & 0xF);
    return lo + static_cast<T>(c) * scale;
}

inline void header_of(const uint8_t* o, int64_t width, float* lo, float* scale) {
    std::memcpy(lo, o + width - 8, 4);
    std::memcpy(scale, o + width - 4, 4);
}

// out[r, j] = lo + c * s, float32.
inline void decode_rows(const uint8_t* packed, int64_t n, int64_t d, int bits, int64_t width, float* out) {
    for (int64_t r = 0; r < n; ++r) {
        const uint8_t* o = packed + r * width;
        float lo, scale;
        header_of(o, width, &lo, &scale);
        float* y = out + r * d;
        for (int64_t j = 0; j < d; ++j) y[j] = decoded<float>(o, j, bits, lo, scale);
    }
}

// target[offsets[r], j] += lo + c * s, in float64 (the owner's gradient shard).
inline void accumulate_rows(const uint8_t* packed, int64_t n, int64_t d, int bits, int64_t width,
                            const int64_t* offsets, double* target) {
    for (int64_t r = 0; r < n; ++r) {
        const uint8_t* o = packed + r * width;
        float lo, scale;
        header_of(o, width, &lo, &scale);
        double* t = target + offsets[r] * d;
        const double lo64 = lo, scale64 = scale;
        for (int64_t j = 0; j < d; ++j) t[j] += decoded<double>(o, j, bits, lo64, scale64);
    }
}

}  // namespace sni

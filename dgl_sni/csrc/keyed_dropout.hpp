// Keyed dropout: the keep/drop decision for element (row, col) is a pure function of
// (seed, key[row], col), so every process that holds a row (its owner, or a worker
// that has it as a halo row) drops exactly the same elements without communicating,
// and backward can regenerate the mask instead of storing it.
#pragma once
#include <cstdint>

namespace sni {

inline uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

inline uint32_t mix32(uint32_t h) {
    h ^= h >> 16;
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    h *= 0xC2B2AE35u;
    h ^= h >> 16;
    return h;
}

// The mask stream of one row: every column's draw starts from this.
inline uint32_t dropout_row_base(uint64_t seed, int64_t key) {
    const uint64_t h = splitmix64(seed ^ splitmix64(static_cast<uint64_t>(key)));
    return static_cast<uint32_t>(h) ^ static_cast<uint32_t>(h >> 32);
}

// y[c] = x[c] * scale if mix(base, c) >= threshold else 0 for one row (t: the threshold with
// its sign bit flipped, see keyed_dropout). Inlined into each caller's clone, so it is
// vectorised with the caller's instruction set.
__attribute__((always_inline)) inline void keyed_dropout_row(const float* x, float* y, int64_t cols,
                                                             uint32_t base, int32_t t, float scale) {
    for (int32_t c = 0; c < static_cast<int32_t>(cols); ++c) {
        const uint32_t u = mix32(base + static_cast<uint32_t>(c) * 0x9E3779B9u);
        const int32_t s = static_cast<int32_t>(u ^ 0x80000000u);
        y[c] = x[c] * (s >= t ? scale : 0.0f);
    }
}

inline int32_t dropout_threshold(uint32_t threshold) { return static_cast<int32_t>(threshold ^ 0x80000000u); }

// y[r, c] = x[r, c] * scale if mix(seed, key[r], c) >= threshold else 0.
// threshold = p * 2^32 (drop probability p), scale = 1 / (1 - p). x and y may alias.
// The comparison is done on sign-flipped ints and the select is between constants, so
// GCC if-converts and vectorises the column loop (AVX2 clone: ~0.3 ns per element).
__attribute__((target_clones("avx2", "default")))
inline void keyed_dropout(const float* x, float* y, int64_t rows, int64_t cols,
                          const int64_t* keys, uint64_t seed, uint32_t threshold, float scale) {
    const int32_t t = dropout_threshold(threshold);
    for (int64_t r = 0; r < rows; ++r) {
        keyed_dropout_row(x + r * cols, y + r * cols, cols, dropout_row_base(seed, keys[r]), t, scale);
    }
}

// bits[r]: bit c set where keyed_dropout keeps element (r, c), for the first cols (at most
// 32) columns: the mask of a row in one word, which the sums of dropped rows (row_sum.hpp)
// read instead of drawing it again per edge or writing the dropped rows out.
__attribute__((target_clones("avx2", "default")))
inline void keyed_dropout_bits(int64_t rows, int64_t cols, const int64_t* keys, uint64_t seed,
                               uint32_t threshold, uint32_t* bits) {
    const int32_t t = dropout_threshold(threshold);
    for (int64_t r = 0; r < rows; ++r) {
        const uint32_t base = dropout_row_base(seed, keys[r]);
        uint32_t b = 0;
        for (int32_t c = 0; c < static_cast<int32_t>(cols); ++c) {
            const uint32_t u = mix32(base + static_cast<uint32_t>(c) * 0x9E3779B9u);
            b |= static_cast<uint32_t>(static_cast<int32_t>(u ^ 0x80000000u) >= t) << c;
        }
        bits[r] = b;
    }
}

// The keyed dropout a narrow product applies to the rows of x as it reads them (null keys:
// none), so the dropped rows are never written out.
struct RowDropout {
    const int64_t* keys = nullptr;
    uint64_t seed = 0;
    uint32_t threshold = 0;
    float scale = 1.0f;
};

}  // namespace sni

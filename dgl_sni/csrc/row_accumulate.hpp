// The owner's add of pushed float32 gradient rows into its float64 shard, one pass per row.
//
// target[offsets[r], j] += x[r, j]. Rows are added in the order given, as torch's
// index_add_ does (it sorts the offsets stably first, so each target row still takes its
// contributions in that order); a float32 value is exact in float64, so the sums are too
// unless a row's contributions differ in magnitude by more than about 2^29. torch's CPU
// index_add_ on a 2-d shard sorts the offsets on every call (a radix sort): 20% of a
// server's samples at interval 1 on the 500k-node graph.
#pragma once
#include <cstdint>

namespace sni {

inline void accumulate_float_rows(const float* x, int64_t n, int64_t d, const int64_t* offsets, double* target) {
    for (int64_t r = 0; r < n; ++r) {
        const float* s = x + r * d;
        double* t = target + offsets[r] * d;
        for (int64_t j = 0; j < d; ++j) t[j] += static_cast<double>(s[j]);
    }
}

}  // namespace sni

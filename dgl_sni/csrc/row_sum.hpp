// Sums of rows over a compressed adjacency (dgl_sni.aggregate): out[v] = sum over e in
// indptr[v] .. indptr[v+1] of x[indices[e]], the rows added in edge order. A GCN layer's
// aggregation ``copy_u_sum`` over the in-edges (CSC), and its backward over the out-edges
// (CSR). Rows of 8 or 16 values are summed in vector registers with the next rows
// prefetched; any other width, a value at a time. The sums are float32, in edge order.
#pragma once
#include <cstdint>
#include <cstring>

namespace sni {

typedef float rs8 __attribute__((vector_size(32), aligned(4)));  // 8 lanes, unaligned loads

constexpr int64_t kPrefetchEdges = 8;

template <int V>
__attribute__((always_inline)) inline void row_sum_v(const float* x, const int64_t* indptr, const int64_t* indices,
                                                     int64_t n, float* out) {
    constexpr int W = 8 * V;
    for (int64_t v = 0; v < n; ++v) {
        rs8 acc[V];
        for (int i = 0; i < V; ++i) acc[i] = rs8{};
        const int64_t e1 = indptr[v + 1];
        for (int64_t e = indptr[v]; e < e1; ++e) {
            __builtin_prefetch(x + indices[e + kPrefetchEdges] * W);
            const rs8* xr = reinterpret_cast<const rs8*>(x + indices[e] * W);
            for (int i = 0; i < V; ++i) acc[i] += xr[i];
        }
        std::memcpy(out + v * W, acc, sizeof(acc));
    }
}

// indices must be readable kPrefetchEdges past the last edge (the caller pads them).
__attribute__((target_clones("avx2", "default")))
inline void row_sum(const float* x, int64_t d, const int64_t* indptr, const int64_t* indices, int64_t n,
                    float* out) {
    if (d == 8) {
        row_sum_v<1>(x, indptr, indices, n, out);
    } else if (d == 16) {
        row_sum_v<2>(x, indptr, indices, n, out);
    } else {
        for (int64_t v = 0; v < n; ++v) {
            float* o = out + v * d;
            for (int64_t c = 0; c < d; ++c) o[c] = 0.0f;
            for (int64_t e = indptr[v]; e < indptr[v + 1]; ++e) {
                const float* xr = x + indices[e] * d;
                for (int64_t c = 0; c < d; ++c) o[c] += xr[c];
            }
        }
    }
}

}  // namespace sni

// Sums of rows over a compressed adjacency (dgl_sni.aggregate): out[v] = sum over e in
// indptr[v] .. indptr[v+1] of x[indices[e]], the rows added in edge order. A GCN layer's
// aggregation ``copy_u_sum`` over the in-edges (CSC), and its backward over the out-edges
// (CSR). Rows of 8 or 16 values are summed in vector registers with the next rows
// prefetched; any other width, a value at a time. The sums are float32, in edge order.
// Optional per-row scales of the sources and of the sums (the GCN norms of the halo sums,
// dgl_sni.halo.sums) are applied in the same pass.
#pragma once
#include <cstdint>
#include <cstring>

namespace sni {

typedef float rs8 __attribute__((vector_size(32), aligned(4)));  // 8 lanes, unaligned loads

constexpr int64_t kPrefetchEdges = 8;

template <int V, bool SRC, bool DST>
__attribute__((always_inline)) inline void row_sum_v(const float* x, const int64_t* indptr, const int64_t* indices,
                                                     int64_t n, float* out, const float* ss, const float* ds) {
    constexpr int W = 8 * V;
    for (int64_t v = 0; v < n; ++v) {
        rs8 acc[V];
        for (int i = 0; i < V; ++i) acc[i] = rs8{};
        const int64_t e1 = indptr[v + 1];
        for (int64_t e = indptr[v]; e < e1; ++e) {
            const int64_t u = indices[e];
            __builtin_prefetch(x + indices[e + kPrefetchEdges] * W);
            const rs8* xr = reinterpret_cast<const rs8*>(x + u * W);
            if (SRC) {
                const float s = ss[u];
                for (int i = 0; i < V; ++i) acc[i] += xr[i] * s;
            } else {
                for (int i = 0; i < V; ++i) acc[i] += xr[i];
            }
        }
        if (DST) {
            const float t = ds[v];
            for (int i = 0; i < V; ++i) acc[i] *= t;
        }
        std::memcpy(out + v * W, acc, sizeof(acc));
    }
}

template <int V>
__attribute__((always_inline)) inline void row_sum_w(const float* x, const int64_t* indptr, const int64_t* indices, int64_t n, float* out,
                      const float* ss, const float* ds) {
    if (ss && ds) row_sum_v<V, true, true>(x, indptr, indices, n, out, ss, ds);
    else if (ss) row_sum_v<V, true, false>(x, indptr, indices, n, out, ss, ds);
    else if (ds) row_sum_v<V, false, true>(x, indptr, indices, n, out, ss, ds);
    else row_sum_v<V, false, false>(x, indptr, indices, n, out, ss, ds);
}

// indices must be readable kPrefetchEdges past the last edge (the caller pads them).
// src_scale (one value per row of x) scales each row as it is added, dst_scale (one per
// output row) each sum: the products of ``copy_u_sum(x * src_scale) * dst_scale``; either
// may be null.
__attribute__((target_clones("avx2", "default")))
inline void row_sum(const float* x, int64_t d, const int64_t* indptr, const int64_t* indices, int64_t n,
                    float* out, const float* src_scale = nullptr, const float* dst_scale = nullptr) {
    if (d == 8) {
        row_sum_w<1>(x, indptr, indices, n, out, src_scale, dst_scale);
    } else if (d == 16) {
        row_sum_w<2>(x, indptr, indices, n, out, src_scale, dst_scale);
    } else {
        for (int64_t v = 0; v < n; ++v) {
            float* o = out + v * d;
            for (int64_t c = 0; c < d; ++c) o[c] = 0.0f;
            for (int64_t e = indptr[v]; e < indptr[v + 1]; ++e) {
                const float* xr = x + indices[e] * d;
                if (src_scale) {
                    const float s = src_scale[indices[e]];
                    for (int64_t c = 0; c < d; ++c) o[c] += xr[c] * s;
                } else {
                    for (int64_t c = 0; c < d; ++c) o[c] += xr[c];
                }
            }
            if (dst_scale)
                for (int64_t c = 0; c < d; ++c) o[c] *= dst_scale[v];
        }
    }
}

}  // namespace sni

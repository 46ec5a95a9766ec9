// Dense products with a narrow side (at most 16 columns), for the projections of GCN layers
// (dgl_sni.narrow_matmul):
//   narrow_matmul(x [n, k], w [k, m])  -> out [n, m]    out = x w
//   narrow_outer (x [n, k], g [n, m])  -> out [k, m]    out = x^T g
// A partition's source rows are many (owned + halo) and the layer widths small, and one
// thread of MKL runs these shapes at a third of memory speed or less (measured: 200k-node
// graph, 172k source rows, x w with k=64, m=16 in 9-12 ms; k=16, m=8 in 3-6 ms and x^T g in
// 5-12 ms). Here a row's product is one pass over it with the outputs in vector registers.
//
// Each output lane sums its terms in a fixed order that does not depend on the CPU (the
// build turns off FMA contraction, and the vectorised and scalar clones do the same float
// operations), nor on how many rows the call gets: out row r depends on x row r only.
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

namespace sni {

typedef float f8 __attribute__((vector_size(32), aligned(4)));  // 8 lanes, unaligned loads

// out[r] = x[r] w for V groups of 8 columns; wp: w padded to 8V columns, row-major.
// The k terms go into four partial sums (k mod 4), added as (s0 + s1) + (s2 + s3).
template <int V>
__attribute__((always_inline)) inline void narrow_rows(const float* x, int64_t n, int64_t k,
                                                       const float* wp, float* out, int64_t m) {
    constexpr int W = 8 * V;
    for (int64_t r = 0; r < n; ++r) {
        f8 s0[V], s1[V], s2[V], s3[V];
        for (int v = 0; v < V; ++v) s0[v] = s1[v] = s2[v] = s3[v] = f8{};
        const float* xr = x + r * k;
        int64_t j = 0;
        for (; j + 4 <= k; j += 4) {
            const f8* w0 = reinterpret_cast<const f8*>(wp + j * W);
            const float b0 = xr[j], b1 = xr[j + 1], b2 = xr[j + 2], b3 = xr[j + 3];
            for (int v = 0; v < V; ++v) {
                s0[v] += b0 * w0[v];
                s1[v] += b1 * w0[V + v];
                s2[v] += b2 * w0[2 * V + v];
                s3[v] += b3 * w0[3 * V + v];
            }
        }
        for (; j < k; ++j) {
            const f8* wj = reinterpret_cast<const f8*>(wp + j * W);
            for (int v = 0; v < V; ++v) s0[v] += xr[j] * wj[v];
        }
        f8 acc[V];
        for (int v = 0; v < V; ++v) acc[v] = (s0[v] + s1[v]) + (s2[v] + s3[v]);
        if (m == W) {
            std::memcpy(out + r * m, acc, sizeof(acc));
        } else {
            std::memcpy(out + r * m, acc, sizeof(float) * m);
        }
    }
}

// acc[j] += sum over the tile's rows of x[r, j] g[r] for V groups of 8 columns; gp: the
// tile's g rows padded to 8V columns. Four columns j of x at a time, each in its own sums.
template <int V>
__attribute__((always_inline)) inline void narrow_outer_tile(const float* x, int64_t rows, int64_t k,
                                                             const float* gp, float* acc) {
    constexpr int W = 8 * V;
    int64_t j = 0;
    for (; j + 4 <= k; j += 4) {
        f8 c0[V], c1[V], c2[V], c3[V];
        for (int v = 0; v < V; ++v) c0[v] = c1[v] = c2[v] = c3[v] = f8{};
        for (int64_t r = 0; r < rows; ++r) {
            const float* xr = x + r * k + j;
            const f8* gr = reinterpret_cast<const f8*>(gp + r * W);
            const float b0 = xr[0], b1 = xr[1], b2 = xr[2], b3 = xr[3];
            for (int v = 0; v < V; ++v) {
                const f8 gv = gr[v];
                c0[v] += b0 * gv;
                c1[v] += b1 * gv;
                c2[v] += b2 * gv;
                c3[v] += b3 * gv;
            }
        }
        f8* a = reinterpret_cast<f8*>(acc + j * W);
        for (int v = 0; v < V; ++v) {
            a[v] += c0[v];
            a[V + v] += c1[v];
            a[2 * V + v] += c2[v];
            a[3 * V + v] += c3[v];
        }
    }
    for (; j < k; ++j) {
        f8 c0[V];
        for (int v = 0; v < V; ++v) c0[v] = f8{};
        for (int64_t r = 0; r < rows; ++r) {
            const f8* gr = reinterpret_cast<const f8*>(gp + r * W);
            for (int v = 0; v < V; ++v) c0[v] += x[r * k + j] * gr[v];
        }
        f8* a = reinterpret_cast<f8*>(acc + j * W);
        for (int v = 0; v < V; ++v) a[v] += c0[v];
    }
}

constexpr int64_t kOuterTile = 32;  // rows per tile of narrow_outer: x's tile stays in L1

template <int V>
__attribute__((always_inline)) inline void narrow_outer_v(const float* x, int64_t n, int64_t k,
                                                          const float* g, int64_t m, float* out) {
    constexpr int W = 8 * V;
    std::vector<float> acc(static_cast<size_t>(k) * W, 0.f);
    std::vector<float> tile(static_cast<size_t>(kOuterTile) * W, 0.f);
    for (int64_t r0 = 0; r0 < n; r0 += kOuterTile) {
        const int64_t rows = n - r0 < kOuterTile ? n - r0 : kOuterTile;
        const float* gp = g + r0 * m;
        if (m != W) {  // pad the tile's rows so every load is whole
            for (int64_t r = 0; r < rows; ++r) {
                std::memcpy(tile.data() + r * W, g + (r0 + r) * m, sizeof(float) * m);
            }
            gp = tile.data();
        }
        narrow_outer_tile<V>(x + r0 * k, rows, k, gp, acc.data());
    }
    for (int64_t j = 0; j < k; ++j) std::memcpy(out + j * m, acc.data() + j * W, sizeof(float) * m);
}

// out [n, m] = x [n, k] w [k, m], 1 <= m <= 16, all row-major.
__attribute__((target_clones("avx2", "default")))
inline void narrow_matmul(const float* x, int64_t n, int64_t k, const float* w, int64_t m, float* out) {
    const int V = m > 8 ? 2 : 1;
    const int W = 8 * V;
    std::vector<float> wp(static_cast<size_t>(k) * W, 0.f);
    for (int64_t j = 0; j < k; ++j) std::memcpy(wp.data() + j * W, w + j * m, sizeof(float) * m);
    if (V == 1) {
        narrow_rows<1>(x, n, k, wp.data(), out, m);
    } else {
        narrow_rows<2>(x, n, k, wp.data(), out, m);
    }
}

// out [k, m] = x [n, k]^T g [n, m], 1 <= m <= 16, all row-major.
__attribute__((target_clones("avx2", "default")))
inline void narrow_outer(const float* x, int64_t n, int64_t k, const float* g, int64_t m, float* out) {
    if (m > 8) {
        narrow_outer_v<2>(x, n, k, g, m, out);
    } else {
        narrow_outer_v<1>(x, n, k, g, m, out);
    }
}

}  // namespace sni

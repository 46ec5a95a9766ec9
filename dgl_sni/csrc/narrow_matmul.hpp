// Dense products with a narrow side (at most 16 columns), for the projections of GCN layers
// (dgl_sni.narrow_matmul):
//   narrow_matmul(x [n, k], w [k, m])  -> out [n, m]    out = x w
//   narrow_outer (x [n, k], g [n, m])  -> out [k, m]    out = x^T g
// each optionally with a per-row scale (a GCN layer's degree norm): of x's rows (in_scale:
// out = diag(s) x w), of the output rows (out_scale: out = diag(s) (x w)) or of g's rows
// (out = x^T diag(s) g). A scaled row is the float product torch would materialise (x[r, j]
// * s[r], or the output lane times s[r]), so the results are the bits of the scaling op
// followed by the product.
// A partition's source rows are many (owned + halo) and the layer widths small, and one
// thread of MKL runs these shapes at a third of memory speed or less (measured: 200k-node
// graph, 172k source rows, x w with k=64, m=16 in 9-12 ms; k=16, m=8 in 3-6 ms and x^T g in
// 5-12 ms). Here a row's product is one pass over it with the outputs in vector registers.
//
// Each output lane sums its terms in a fixed order that does not depend on the CPU (the
// build turns off FMA contraction, and the vectorised and scalar clones do the same float
// operations), nor on how many rows the call gets: out row r depends on x row r only.
//
// With a RowDropout (keyed_dropout.hpp), x's rows are dropped as they are read: each row
// (each tile of rows, for narrow_outer) is dropped into a small buffer first, the values
// keyed_dropout would write, so the products are the bits of keyed_dropout followed by
// the product, without the dropped rows going through memory.
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

#include "keyed_dropout.hpp"

namespace sni {

typedef float f8 __attribute__((vector_size(32), aligned(4)));  // 8 lanes, unaligned loads

// out[r] = x[r] w for V groups of 8 columns; wp: w padded to 8V columns, row-major.
// The k terms go into four partial sums (k mod 4), added as (s0 + s1) + (s2 + s3).
template <int V, bool InScale, bool Drop>
__attribute__((always_inline)) inline void narrow_rows(const float* x, int64_t n, int64_t k,
                                                       const float* wp, float* out, int64_t m,
                                                       const float* in_scale, const float* out_scale,
                                                       const RowDropout& drop, float* row) {
    constexpr int W = 8 * V;
    const int32_t t = dropout_threshold(drop.threshold);
    for (int64_t r = 0; r < n; ++r) {
        f8 s0[V], s1[V], s2[V], s3[V];
        for (int v = 0; v < V; ++v) s0[v] = s1[v] = s2[v] = s3[v] = f8{};
        const float* xr = x + r * k;
        if (Drop) {
            keyed_dropout_row(xr, row, k, dropout_row_base(drop.seed, drop.keys[r]), t, drop.scale);
            xr = row;
        }
        const float sc = InScale ? in_scale[r] : 1.0f;
        int64_t j = 0;
        for (; j + 4 <= k; j += 4) {
            const f8* w0 = reinterpret_cast<const f8*>(wp + j * W);
            float b0 = xr[j], b1 = xr[j + 1], b2 = xr[j + 2], b3 = xr[j + 3];
            if (InScale) {
                b0 = b0 * sc;
                b1 = b1 * sc;
                b2 = b2 * sc;
                b3 = b3 * sc;
            }
            for (int v = 0; v < V; ++v) {
                s0[v] += b0 * w0[v];
                s1[v] += b1 * w0[V + v];
                s2[v] += b2 * w0[2 * V + v];
                s3[v] += b3 * w0[3 * V + v];
            }
        }
        for (; j < k; ++j) {
            const f8* wj = reinterpret_cast<const f8*>(wp + j * W);
            const float b = InScale ? xr[j] * sc : xr[j];
            for (int v = 0; v < V; ++v) s0[v] += b * wj[v];
        }
        f8 acc[V];
        for (int v = 0; v < V; ++v) acc[v] = (s0[v] + s1[v]) + (s2[v] + s3[v]);
        if (out_scale) {
            const float so = out_scale[r];
            for (int v = 0; v < V; ++v) acc[v] = acc[v] * so;
        }
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
                                                          const float* g, int64_t m, const float* g_scale,
                                                          const RowDropout& drop, float* out) {
    constexpr int W = 8 * V;
    std::vector<float> acc(static_cast<size_t>(k) * W, 0.f);
    std::vector<float> tile(static_cast<size_t>(kOuterTile) * W, 0.f);
    std::vector<float> xtile(drop.keys ? static_cast<size_t>(kOuterTile) * k : 0);
    const int32_t t = dropout_threshold(drop.threshold);
    for (int64_t r0 = 0; r0 < n; r0 += kOuterTile) {
        const int64_t rows = n - r0 < kOuterTile ? n - r0 : kOuterTile;
        const float* xp = x + r0 * k;
        if (drop.keys) {  // the tile's rows of x, dropped
            for (int64_t r = 0; r < rows; ++r) {
                keyed_dropout_row(xp + r * k, xtile.data() + r * k, k,
                                  dropout_row_base(drop.seed, drop.keys[r0 + r]), t, drop.scale);
            }
            xp = xtile.data();
        }
        const float* gp = g + r0 * m;
        if (g_scale) {  // the tile holds the scaled rows, padded
            for (int64_t r = 0; r < rows; ++r) {
                const float f = g_scale[r0 + r];
                const float* gr = g + (r0 + r) * m;
                float* tr = tile.data() + r * W;
                for (int64_t c = 0; c < m; ++c) tr[c] = gr[c] * f;
            }
            gp = tile.data();
        } else if (m != W) {  // pad the tile's rows so every load is whole
            for (int64_t r = 0; r < rows; ++r) {
                std::memcpy(tile.data() + r * W, g + (r0 + r) * m, sizeof(float) * m);
            }
            gp = tile.data();
        }
        narrow_outer_tile<V>(xp, rows, k, gp, acc.data());
    }
    for (int64_t j = 0; j < k; ++j) std::memcpy(out + j * m, acc.data() + j * W, sizeof(float) * m);
}

template <int V>
__attribute__((always_inline)) inline void narrow_matmul_v(const float* x, int64_t n, int64_t k, const float* wp,
                                                           int64_t m, float* out, const float* in_scale,
                                                           const float* out_scale, const RowDropout& drop) {
    std::vector<float> row(drop.keys ? k : 0);
    if (drop.keys) {
        narrow_rows<V, false, true>(x, n, k, wp, out, m, in_scale, out_scale, drop, row.data());
    } else if (in_scale) {
        narrow_rows<V, true, false>(x, n, k, wp, out, m, in_scale, out_scale, drop, row.data());
    } else {
        narrow_rows<V, false, false>(x, n, k, wp, out, m, in_scale, out_scale, drop, row.data());
    }
}

// out [n, m] = x [n, k] w [k, m], 1 <= m <= 16, all row-major; in_scale, out_scale: [n]
// or null; drop: x's rows dropped as read (not with in_scale).
__attribute__((target_clones("avx2", "default")))
inline void narrow_matmul(const float* x, int64_t n, int64_t k, const float* w, int64_t m, float* out,
                          const float* in_scale = nullptr, const float* out_scale = nullptr,
                          RowDropout drop = RowDropout()) {
    const int V = m > 8 ? 2 : 1;
    const int W = 8 * V;
    std::vector<float> wp(static_cast<size_t>(k) * W, 0.f);
    for (int64_t j = 0; j < k; ++j) std::memcpy(wp.data() + j * W, w + j * m, sizeof(float) * m);
    if (V == 1) {
        narrow_matmul_v<1>(x, n, k, wp.data(), m, out, in_scale, out_scale, drop);
    } else {
        narrow_matmul_v<2>(x, n, k, wp.data(), m, out, in_scale, out_scale, drop);
    }
}

// out [k, m] = x [n, k]^T g [n, m], 1 <= m <= 16, all row-major; g_scale: [n] or null;
// drop: x's rows dropped as read.
__attribute__((target_clones("avx2", "default")))
inline void narrow_outer(const float* x, int64_t n, int64_t k, const float* g, int64_t m, float* out,
                         const float* g_scale = nullptr, RowDropout drop = RowDropout()) {
    if (m > 8) {
        narrow_outer_v<2>(x, n, k, g, m, g_scale, drop, out);
    } else {
        narrow_outer_v<1>(x, n, k, g, m, g_scale, drop, out);
    }
}

}  // namespace sni

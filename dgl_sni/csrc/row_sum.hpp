// Sums of rows over a compressed adjacency (dgl_sni.aggregate): out[v] = sum over e in
// indptr[v] .. indptr[v+1] of x[indices[e]], the rows added in edge order. A GCN layer's
// aggregation ``copy_u_sum`` over the in-edges (CSC), and its backward over the out-edges
// (CSR). Rows of 8 or 16 values are summed in vector registers with the next rows
// prefetched; any other width, a value at a time. The sums are float32, in edge order.
// Optional per-row scales of the sources and of the sums (the GCN norms of the halo sums,
// dgl_sni.halo.sums) are applied in the same pass, and so is a keyed dropout given as one
// word of keep bits per row (keyed_dropout_bits): of the sources, whose dropped sum comes
// with their plain sum where asked (row_dropped_sum: a sync step's halo rows, trained on
// dropped and kept undropped for the stale steps), or of the sums (its backward). A dropped
// value is ``x * keep`` or ``x * 0``, as keyed_dropout writes it, then scaled: the same
// bits as dropping the rows first and summing them.
#pragma once
#include <cstdint>
#include <cstring>

namespace sni {

typedef float rs8 __attribute__((vector_size(32), aligned(4)));  // 8 lanes, unaligned loads

constexpr int64_t kPrefetchEdges = 8;

// The factors of 8 lanes for each value of their 8 keep bits: ``keep`` where the bit is
// set, 0 elsewhere (an 8 KiB table read per row instead of expanding the bits each time).
struct KeptLanes {
    rs8 lanes[256];

    explicit KeptLanes(float keep) {
        for (int b = 0; b < 256; ++b)
            for (int i = 0; i < 8; ++i) lanes[b][i] = (b >> i) & 1 ? keep : 0.0f;
    }

    // Lanes 8 * group .. 8 * group + 7 of a row whose keep bits are ``bits``.
    const rs8& of(uint32_t bits, int group) const { return lanes[(bits >> (8 * group)) & 0xffu]; }
};

template <bool MASK>
struct KeptLanesIf {  // no table where nothing is dropped
    explicit KeptLanesIf(float) {}
};

template <>
struct KeptLanesIf<true> : KeptLanes {
    using KeptLanes::KeptLanes;
};

template <int V, bool SRC, bool DST, bool MASK>
__attribute__((always_inline)) inline void row_sum_v(const float* x, const int64_t* indptr, const int64_t* indices,
                                                     int64_t n, float* out, const float* ss, const float* ds,
                                                     const uint32_t* bits, float keep) {
    constexpr int W = 8 * V;
    const KeptLanesIf<MASK> kept(keep);
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
        if constexpr (MASK) {
            const uint32_t b = bits[v];
            for (int i = 0; i < V; ++i) acc[i] *= kept.of(b, i);
        }
        std::memcpy(out + v * W, acc, sizeof(acc));
    }
}

template <int V, bool MASK>
__attribute__((always_inline)) inline void row_sum_m(const float* x, const int64_t* indptr, const int64_t* indices,
                                                     int64_t n, float* out, const float* ss, const float* ds,
                                                     const uint32_t* bits, float keep) {
    if (ss && ds) row_sum_v<V, true, true, MASK>(x, indptr, indices, n, out, ss, ds, bits, keep);
    else if (ss) row_sum_v<V, true, false, MASK>(x, indptr, indices, n, out, ss, ds, bits, keep);
    else if (ds) row_sum_v<V, false, true, MASK>(x, indptr, indices, n, out, ss, ds, bits, keep);
    else row_sum_v<V, false, false, MASK>(x, indptr, indices, n, out, ss, ds, bits, keep);
}

template <int V>
__attribute__((always_inline)) inline void row_sum_w(const float* x, const int64_t* indptr, const int64_t* indices,
                                                     int64_t n, float* out, const float* ss, const float* ds,
                                                     const uint32_t* bits, float keep) {
    if (bits) row_sum_m<V, true>(x, indptr, indices, n, out, ss, ds, bits, keep);
    else row_sum_m<V, false>(x, indptr, indices, n, out, ss, ds, bits, keep);
}

// The dropped sum of the sources (their keep bits ``bits``) into ``dropped`` and, with PLAIN,
// their undropped sum into ``plain``, reading each source row once.
template <int V, bool SRC, bool PLAIN>
__attribute__((always_inline)) inline void row_dropped_sum_v(const float* x, const int64_t* indptr,
                                                             const int64_t* indices, int64_t n, const uint32_t* bits,
                                                             float keep, float* dropped, float* plain, const float* ss) {
    constexpr int W = 8 * V;
    const KeptLanes kept(keep);
    for (int64_t v = 0; v < n; ++v) {
        rs8 acc[V], all[V];
        for (int i = 0; i < V; ++i) acc[i] = all[i] = rs8{};
        const int64_t e1 = indptr[v + 1];
        for (int64_t e = indptr[v]; e < e1; ++e) {
            const int64_t u = indices[e], ahead = indices[e + kPrefetchEdges];
            __builtin_prefetch(x + ahead * W);
            __builtin_prefetch(bits + ahead);
            const rs8* xr = reinterpret_cast<const rs8*>(x + u * W);
            const uint32_t b = bits[u];
            for (int i = 0; i < V; ++i) {
                const rs8 y = xr[i] * kept.of(b, i);
                if (SRC) {
                    const float s = ss[u];
                    acc[i] += y * s;
                    if (PLAIN) all[i] += xr[i] * s;
                } else {
                    acc[i] += y;
                    if (PLAIN) all[i] += xr[i];
                }
            }
        }
        std::memcpy(dropped + v * W, acc, sizeof(acc));
        if (PLAIN) std::memcpy(plain + v * W, all, sizeof(all));
    }
}

template <int V>
__attribute__((always_inline)) inline void row_dropped_sum_w(const float* x, const int64_t* indptr,
                                                             const int64_t* indices, int64_t n, const uint32_t* bits,
                                                             float keep, float* dropped, float* plain, const float* ss) {
    if (ss && plain) row_dropped_sum_v<V, true, true>(x, indptr, indices, n, bits, keep, dropped, plain, ss);
    else if (ss) row_dropped_sum_v<V, true, false>(x, indptr, indices, n, bits, keep, dropped, plain, ss);
    else if (plain) row_dropped_sum_v<V, false, true>(x, indptr, indices, n, bits, keep, dropped, plain, ss);
    else row_dropped_sum_v<V, false, false>(x, indptr, indices, n, bits, keep, dropped, plain, ss);
}

// Rows of 8 or 16 values only (the caller checks). indices padded as for row_sum; plain and
// src_scale may be null.
__attribute__((target_clones("avx2", "default")))
inline void row_dropped_sum(const float* x, int64_t d, const int64_t* indptr, const int64_t* indices, int64_t n,
                            const uint32_t* bits, float keep, float* dropped, float* plain,
                            const float* src_scale = nullptr) {
    if (d == 8) row_dropped_sum_w<1>(x, indptr, indices, n, bits, keep, dropped, plain, src_scale);
    else row_dropped_sum_w<2>(x, indptr, indices, n, bits, keep, dropped, plain, src_scale);
}

// indices must be readable kPrefetchEdges past the last edge (the caller pads them).
// src_scale (one value per row of x) scales each row as it is added, dst_scale (one per
// output row) each sum: the products of ``copy_u_sum(x * src_scale) * dst_scale``; either
// may be null. dst_bits (rows of 8 or 16 values only): each sum is then dropped by its
// keep bits after its scale (a dropped sum's backward).
__attribute__((target_clones("avx2", "default")))
inline void row_sum(const float* x, int64_t d, const int64_t* indptr, const int64_t* indices, int64_t n,
                    float* out, const float* src_scale = nullptr, const float* dst_scale = nullptr,
                    const uint32_t* dst_bits = nullptr, float keep = 1.0f) {
    if (d == 8) {
        row_sum_w<1>(x, indptr, indices, n, out, src_scale, dst_scale, dst_bits, keep);
    } else if (d == 16) {
        row_sum_w<2>(x, indptr, indices, n, out, src_scale, dst_scale, dst_bits, keep);
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

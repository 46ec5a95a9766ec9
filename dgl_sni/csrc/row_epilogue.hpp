// The row epilogue of a GCN layer (dgl_sni.epilogue): after its aggregation and projection,
// a layer scales each destination row by its degree norm, adds the bias and applies the
// activation, and a model adds the halo rows' sum first where the layer projects before
// it aggregates. As separate torch ops that is four passes over the rows forward and three
// backward (threshold, scale, bias sum), each allocating its output; here one each way.
//
//   forward:  y[r, c] = act((s[r, c] + t[r, c]) * rs[r] + b[c])      (t, b optional)
//   backward: z = act'(y) g;  gs[r, c] = z[r, c] * rs[r];  gb[c] += sum_r z[r, c]
//
// act is relu (max with 0, NaN kept) or the identity. The forward's float operations and
// their order are those of the torch ops it replaces (the build turns off FMA
// contraction), so its rows are the same bits; the bias gradient is summed in float64.
#pragma once
#include <cstdint>

namespace sni {

template <bool HasT, bool HasB, bool Relu>
__attribute__((always_inline)) inline void epilogue_rows(const float* s, const float* t, const float* rs,
                                                         const float* b, int64_t n, int64_t d, float* y) {
    for (int64_t r = 0; r < n; ++r) {
        const float f = rs[r];
        const float* sr = s + r * d;
        const float* tr = HasT ? t + r * d : nullptr;
        float* yr = y + r * d;
        for (int64_t c = 0; c < d; ++c) {
            float v = sr[c];
            if (HasT) v = v + tr[c];
            v = v * f;
            if (HasB) v = v + b[c];
            if (Relu) v = v < 0.0f ? 0.0f : v;
            yr[c] = v;
        }
    }
}

__attribute__((target_clones("avx2", "default")))
inline void scale_bias_act(const float* s, const float* t, const float* rs, const float* b, int64_t n,
                           int64_t d, bool relu, float* y) {
    const int which = (t ? 4 : 0) | (b ? 2 : 0) | (relu ? 1 : 0);
    switch (which) {
        case 0: epilogue_rows<false, false, false>(s, t, rs, b, n, d, y); break;
        case 1: epilogue_rows<false, false, true>(s, t, rs, b, n, d, y); break;
        case 2: epilogue_rows<false, true, false>(s, t, rs, b, n, d, y); break;
        case 3: epilogue_rows<false, true, true>(s, t, rs, b, n, d, y); break;
        case 4: epilogue_rows<true, false, false>(s, t, rs, b, n, d, y); break;
        case 5: epilogue_rows<true, false, true>(s, t, rs, b, n, d, y); break;
        case 6: epilogue_rows<true, true, false>(s, t, rs, b, n, d, y); break;
        default: epilogue_rows<true, true, true>(s, t, rs, b, n, d, y); break;
    }
}

// Rows per block of the bias gradient: its float sums go into the float64 total per block,
// so the total's error does not grow with the number of rows.
constexpr int64_t kBiasBlock = 64;

template <bool Relu>
__attribute__((always_inline)) inline void epilogue_backward_rows(const float* g, const float* y, const float* rs,
                                                                  int64_t n, int64_t d, float* gs,
                                                                  float* part, double* gb) {
    for (int64_t r0 = 0; r0 < n; r0 += kBiasBlock) {
        const int64_t r1 = n - r0 < kBiasBlock ? n : r0 + kBiasBlock;
        if (gb) {
            for (int64_t c = 0; c < d; ++c) part[c] = 0.0f;
        }
        for (int64_t r = r0; r < r1; ++r) {
            const float f = rs[r];
            const float* gr = g + r * d;
            const float* yr = Relu ? y + r * d : nullptr;
            float* sr = gs + r * d;
            for (int64_t c = 0; c < d; ++c) {
                const float z = Relu ? (yr[c] > 0.0f ? gr[c] : 0.0f) : gr[c];
                sr[c] = z * f;
                part[c] += z;
            }
        }
        if (gb) {
            for (int64_t c = 0; c < d; ++c) gb[c] += part[c];
        }
    }
}

// gs and gb as above; y null: no activation; gb null: no bias gradient; part: d floats of
// scratch.
__attribute__((target_clones("avx2", "default")))
inline void scale_bias_act_backward(const float* g, const float* y, const float* rs, int64_t n, int64_t d,
                                    float* gs, float* part, double* gb) {
    if (y) {
        epilogue_backward_rows<true>(g, y, rs, n, d, gs, part, gb);
    } else {
        epilogue_backward_rows<false>(g, y, rs, n, d, gs, part, gb);
    }
}

}  // namespace sni

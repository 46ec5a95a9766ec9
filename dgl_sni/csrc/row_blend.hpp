// Blends of two row blocks in one pass, for the stale path's averages (float32, element-wise).
//
// smooth_rows: out = (old - fresh) * g + fresh, the resolver's exponential average of halo
// rows over syncs (dgl_sni.halo.resolver); mix_rows: out = a * ga + b * gb, the blend of
// the kept halo sums and of the sync gradients (dgl_sni.halo.averages.mix); trend_rows: the
// double exponential average over steps (dgl_sni.halo.averages.trend). Each is the
// float operations of the numpy and torch expressions they replace, in the same order (the
// build turns off FMA contraction), so the results are equal to the bit; those took two or
// three passes over the rows, each writing a block of the rows' size.
#pragma once
#include <cstdint>

namespace sni {

// out may be old or fresh.
inline void smooth_rows(const float* old, const float* fresh, int64_t n, float g, float* out) {
    for (int64_t i = 0; i < n; ++i) {
        const float f = fresh[i];
        out[i] = (old[i] - f) * g + f;
    }
}

// out may be a or b.
inline void mix_rows(const float* a, float ga, const float* b, float gb, int64_t n, float* out) {
    for (int64_t i = 0; i < n; ++i) out[i] = a[i] * ga + b[i] * gb;
}

// The double exponential average: avg = avg * ga + fresh * gb, twice = twice * ga + avg * gb
// (both in place), out = twice * -1 + avg * 2: the three mix_rows calls it replaces, in one pass.
inline void trend_rows(float* avg, float* twice, const float* fresh, float ga, float gb, int64_t n,
                       float* out) {
    for (int64_t i = 0; i < n; ++i) {
        const float e = avg[i] * ga + fresh[i] * gb;
        const float t = twice[i] * ga + e * gb;
        avg[i] = e;
        twice[i] = t;
        out[i] = t * -1.0f + e * 2.0f;
    }
}

}  // namespace sni

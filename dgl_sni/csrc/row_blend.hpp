// Blends of two row blocks in one pass, for the stale path's averages (float32, element-wise).
//
// smooth_rows: out = (old - fresh) * g + fresh, the resolver's exponential average of halo
// rows over syncs (dgl_sni.halo.resolver); mix_rows: out = a * ga + b * gb, the blend of
// the kept halo sums and of the sync gradients (dgl_sni.halo.averages.mix). Each is the
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

}  // namespace sni
